#!/usr/bin/env bash
# make loadtest: the demo backend and Sentinel with config.yaml on loopback
# ports of their own, 20 seconds of open-loop traffic through the gateway
# (acme, PREMIUM, under its limits; demo, FREE, over its 5-per-10s rule), then
# everything stops.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
go build -o bin/sentinel .
go build -o bin/demo-backend ./loadtest/backend
go build -o bin/gen ./loadtest/gen
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT INT TERM
bin/demo-backend -listen 127.0.0.1:9300 -duration 60s >/dev/null 2>&1 &
pids+=($!)
SENTINEL_SERVER_LISTEN=127.0.0.1:8300 SENTINEL_SERVER_ADMIN_LISTEN=127.0.0.1:9390 \
SENTINEL_UPSTREAMS_API_TARGETS=http://127.0.0.1:9300 bin/sentinel -config config.yaml >/tmp/sentinel-loadtest.log 2>&1 &
pids+=($!)
for _ in $(seq 50); do curl -sf http://127.0.0.1:9390/healthz >/dev/null && break; sleep 0.1; done
# gen's plan keys are those of loadtest/overload.yaml; map them to config.yaml's tenants.
bin/gen -target http://127.0.0.1:8300 -admin http://127.0.0.1:9390 -keys "P=acme-live-1,F=demo-key-1" \
  -phases "steady:20s:P=30,F=5" -label "make loadtest: config.yaml, 20 s"
curl -s http://127.0.0.1:9390/metrics | grep -E '^rate_limit_(allowed|blocked)_total' || true
