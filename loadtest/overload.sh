#!/usr/bin/env bash
# The overload scenario: the demo backend (5 workers × 50 ms = 100 requests/s)
# under PREMIUM and STANDARD steady traffic and a FREE spike to 10× its
# capacity, then a slow-backend phase (latency ×4 at constant offered load).
# Run A sends straight to the backend (no protection); run B goes through
# Sentinel. Everything listens on 127.0.0.1 and stops at the end. < 3 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p bin
go build -o bin/sentinel .
go build -o bin/demo-backend ./loadtest/backend
go build -o bin/gen ./loadtest/gen

BACKEND=127.0.0.1:9100
CAPACITY=100
PHASES="warmup:10s:P=20,S=20,F=20;spike:20s:P=20,S=20,F=1000;recovery:10s:P=20,S=20,F=20;slow:15s:P=20,S=20,F=20:http://$BACKEND/_backend/config?latency=200ms"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

start_backend() {
  bin/demo-backend -listen "$BACKEND" -latency 50ms -slots 5 -thrash 2 -queue-timeout 1s -duration 150s >/tmp/sentinel-overload-backend.log 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do curl -sf "http://$BACKEND/healthz" >/dev/null && return; sleep 0.1; done
  echo "backend did not start" >&2; exit 1
}

echo "## Overload scenario (backend capacity $CAPACITY req/s; FREE spikes to 10x)"
if [ -z "${SKIP_DIRECT:-}" ]; then
start_backend
bin/gen -target "http://$BACKEND" -phases "$PHASES" -capacity "$CAPACITY" -label "A: no protection (load straight to the backend)"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
fi

start_backend
bin/sentinel -config loadtest/overload.yaml >/tmp/sentinel-overload-gateway.log 2>&1 &
pids+=($!)
for _ in $(seq 50); do curl -sf http://127.0.0.1:9190/healthz >/dev/null && break; sleep 0.1; done
bin/gen -target http://127.0.0.1:8180 -admin http://127.0.0.1:9190 -phases "$PHASES" -capacity "$CAPACITY" -label "B: through Sentinel"
echo
echo "Mode transitions (gateway log):"
grep -o 'adaptive: mode .*' /tmp/sentinel-overload-gateway.log || echo "none"
