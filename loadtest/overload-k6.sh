#!/usr/bin/env bash
# The overload scenario with k6 (loadtest/k6/overload.js): the same phases
# (a)-(e) as overload.sh, once against the demo backend alone (A) and once
# through Sentinel (B). k6 cannot write broken chunked framing, so during
# phase (d) this script also runs `gen` with the malformed, oversized and slow
# chunked uploads at 5/s. Uses $K6, else k6 on PATH; builds k6 (go install
# go.k6.io/k6@v1.8.1) into $(go env GOPATH)/bin when neither is there. Exits 0
# whatever the targets say. k6 logs (failed requests, crossed thresholds) go to
# $TMPDIR/sentinel-overload-k6-k6.log.
# About 4 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

K6=${K6:-$(command -v k6 || true)}
if [ -z "$K6" ] || [ ! -x "$K6" ]; then
  K6="$(go env GOPATH)/bin/k6"
  [ -x "$K6" ] || { echo "building k6 v1.8.1 (once)"; go install go.k6.io/k6@v1.8.1; }
fi
mkdir -p bin
go build -o bin/sentinel .
go build -o bin/demo-backend ./loadtest/backend
go build -o bin/gen ./loadtest/gen

BACKEND=127.0.0.1:9100
FAST=127.0.0.1:9101
D_START=71 # seconds from the k6 start to phase (d), as in overload.js
LOG=${TMPDIR:-/tmp}/sentinel-overload-k6
: >"$LOG-k6.log"

BACKEND_LIFETIME=300s
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
gateway() {
  local name=$1 port=$2 admin=$3; shift 3
  env SENTINEL_SERVER_LISTEN="127.0.0.1:$port" SENTINEL_SERVER_ADMIN_LISTEN="127.0.0.1:$admin" "$@" \
    bin/sentinel -config loadtest/overload.yaml >"$LOG-$name.log" 2>&1 &
  pids+=($!)
  wait_up "http://127.0.0.1:$admin/healthz"
}
# run LABEL BASE_URL [k6 -e options...]: k6 plus the raw-socket attacker.
run() {
  local label=$1 base=$2; shift 2
  (sleep "$((D_START + 1))"; bin/gen -target "$base" -phases "d.attack:10s:A=5" -label "$label: raw chunked attacker during (d)" >"$LOG-attack.txt" 2>&1) &
  local attacker=$!
  "$K6" run --quiet --no-color -e BASE_URL="$base" -e BACKEND_URL="http://$BACKEND" -e LABEL="$label" "$@" \
    loadtest/k6/overload.js 2>>"$LOG-k6.log" || true
  wait "$attacker" || true
  cat "$LOG-attack.txt"
}

if [ -z "${SKIP_DIRECT:-}" ]; then
  start_backends
  run "A: backend alone" "http://$BACKEND" -e SAT_URL="http://$FAST"
  cleanup; pids=()
fi
start_backends
gateway main 8180 9190
gateway on 8181 9191 SENTINEL_UPSTREAMS_API_TARGETS="http://$FAST"
gateway off 8182 9192 SENTINEL_UPSTREAMS_API_TARGETS="http://$FAST" SENTINEL_ADAPTIVE_ENABLED=false
run "B: behind Sentinel" http://127.0.0.1:8180 -e ADMIN_URL=http://127.0.0.1:9190 \
  -e SAT_URL=http://127.0.0.1:8181 -e SAT_COMPARE_URL=http://127.0.0.1:8182
