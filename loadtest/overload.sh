#!/usr/bin/env bash
# The overload scenario: ways protection can be turned against traffic. Each
# phase runs against the demo backend alone (A) and behind Sentinel (B):
#  (a) a queueing backend (5 workers × 50 ms = 100 req/s, thrashing past a
#      queue of 10) under a FREE spike to 10× capacity;
#  (b) the same backend shedding (503 at once, Retry-After: 1, past a queue
#      of 10) under the same spike;
#  (c) the backend slowing down ×4;
#  (d) an attacker: malformed, oversized and slow chunked uploads at 5/s
#      during normal traffic;
#  (e) a saturating closed loop (64 connections, PREMIUM) on a fast backend
#      (no latency, no worker limit), behind Sentinel with the adaptive layer
#      on and with adaptive.enabled: false, alternating.
# gen prints per phase the tables and the acceptance targets as PASS/FAIL;
# the script exits 0 either way. Everything listens on 127.0.0.1 and stops at
# the end. About 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p bin
go build -o bin/sentinel .
go build -o bin/demo-backend ./loadtest/backend
go build -o bin/gen ./loadtest/gen

BACKEND=127.0.0.1:9100
FAST=127.0.0.1:9101
CAPACITY=100
CFG="http://$BACKEND/_backend/config"
steady="P=20,S=20,F=20"
spike="P=20,S=20,F=1000"
PHASES="a.warmup:5s:$steady;a.spike:10s:$spike;a.recovery:8s:$steady"
PHASES+=";b.warmup:5s:$steady:$CFG?shed_depth=10&retry_after=1;b.spike:10s:$spike;b.recovery:8s:$steady"
PHASES+=";c.slow:10s:$steady:$CFG?shed_depth=0&retry_after=0&latency=200ms;c.recovery:8s:$steady:$CFG?latency=50ms"
ATTACK="d.attack:10s:$steady,A=5"
SATURATE="e.saturate:10s:C=64"
LOG=${TMPDIR:-/tmp}/sentinel-overload

BACKEND_LIFETIME=200s
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
stop_all() { cleanup; pids=(); }
# wait_normal ADMIN: phase (d) starts in Normal mode, whatever (c) left.
wait_normal() {
  local t0=$SECONDS
  for _ in $(seq 300); do
    [ "$(curl -sf "$1/metrics" | awk '$1 == "sentinel_adaptive_mode" {print $2}')" = "0" ] && break
    sleep 0.1
  done
  echo; echo "(waited $((SECONDS - t0)) s for mode Normal before phase (d))"
}
# gateway NAME PORT ADMIN-PORT [VAR=value...]: Sentinel on overload.yaml.
gateway() {
  local name=$1 port=$2 admin=$3; shift 3
  env SENTINEL_SERVER_LISTEN="127.0.0.1:$port" SENTINEL_SERVER_ADMIN_LISTEN="127.0.0.1:$admin" "$@" \
    bin/sentinel -config loadtest/overload.yaml >"$LOG-$name.log" 2>&1 &
  pids+=($!)
  wait_up "http://127.0.0.1:$admin/healthz"
}

echo "## Overload scenario (backend capacity $CAPACITY req/s; FREE spikes to 10x)"
if [ -z "${SKIP_DIRECT:-}" ]; then
  start_backends
  bin/gen -target "http://$BACKEND" -phases "$PHASES" -capacity "$CAPACITY" -check \
    -label "A: backend alone, phases (a)-(c)"
  bin/gen -target "http://$BACKEND" -phases "$ATTACK" -check -label "A: backend alone, phase (d)"
  bin/gen -target "http://$FAST" -phases "$SATURATE" -check -label "A: fast backend alone, phase (e)"
  stop_all
fi

start_backends
gateway main 8180 9190
bin/gen -target http://127.0.0.1:8180 -admin http://127.0.0.1:9190 -phases "$PHASES" -capacity "$CAPACITY" -check \
  -label "B: behind Sentinel, phases (a)-(c)"
wait_normal http://127.0.0.1:9190
bin/gen -target http://127.0.0.1:8180 -admin http://127.0.0.1:9190 -phases "$ATTACK" -check \
  -label "B: behind Sentinel, phase (d)"
echo
echo "Mode transitions (gateway log):"
grep -o 'adaptive: mode .*' "$LOG-main.log" || echo "none"
stop_all

start_backends
gateway on 8181 9191 SENTINEL_UPSTREAMS_API_TARGETS="http://$FAST"
gateway off 8182 9192 SENTINEL_UPSTREAMS_API_TARGETS="http://$FAST" SENTINEL_ADAPTIVE_ENABLED=false
bin/gen -target http://127.0.0.1:8181 -admin http://127.0.0.1:9191 -compare http://127.0.0.1:8182 \
  -compare-label "adaptive.enabled: false" -phases "$SATURATE" -check \
  -label "B: fast backend behind Sentinel, phase (e), adaptive on vs off"
