#!/usr/bin/env bash
# make loadtest-k6: the two k6 scripts that prove enforcement, each against
# its own gateway and demo backend on loopback ports, then everything stops.
#   1. ratelimit.js: config.yaml, demo-key-1 (5 per 10 s) at 20/s for 30 s.
#   2. overload_mix.js: loadtest/overload.yaml in front of the demo backend's
#      capacity model (5 workers × 50 ms = 100 requests/s), FREE up to 1000/s.
# JSON summaries go to bin/k6-ratelimit-summary.json and bin/k6-overload-summary.json.
# Exit status: non-zero when a threshold fails.
set -euo pipefail
cd "$(dirname "$0")/.."
K6=${K6:-$(command -v k6 || echo "$(go env GOPATH)/bin/k6")}
mkdir -p bin
go build -o bin/sentinel .
go build -o bin/demo-backend ./loadtest/backend

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

# gateway CONFIG PROXY_PORT ADMIN_PORT BACKEND_PORT LOG
gateway() {
  SENTINEL_SERVER_LISTEN="127.0.0.1:$2" SENTINEL_SERVER_ADMIN_LISTEN="127.0.0.1:$3" \
  SENTINEL_UPSTREAMS_API_TARGETS="http://127.0.0.1:$4" bin/sentinel -config "$1" >"$5" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$3/readyz" >/dev/null && return; sleep 0.1; done
  echo "gateway on $2 did not start; see $5" >&2
  exit 1
}

status=0
bin/demo-backend -listen 127.0.0.1:9380 -duration 120s >/dev/null 2>&1 &
pids+=($!)
gateway config.yaml 8380 9480 9380 /tmp/sentinel-k6-ratelimit.log
"$K6" run -q --no-color --address "" -e BASE_URL=http://127.0.0.1:8380 -e API_KEY=demo-key-1 -e LIMIT=5 -e WINDOW=10s \
  -e RATE=20 -e DURATION=30s -e SUMMARY=bin/k6-ratelimit-summary.json loadtest/k6/ratelimit.js || status=1
echo

bin/demo-backend -listen 127.0.0.1:9381 -latency 50ms -slots 5 -thrash 2 -queue-timeout 1s -duration 120s >/dev/null 2>&1 &
pids+=($!)
gateway loadtest/overload.yaml 8381 9481 9381 /tmp/sentinel-k6-overload.log
"$K6" run -q --no-color --address "" -e BASE_URL=http://127.0.0.1:8381 -e SUMMARY=bin/k6-overload-summary.json \
  loadtest/k6/overload_mix.js || status=1
exit $status
