# Shared by overload.sh and overload-k6.sh (sourced): process bookkeeping and
# the two demo backends of the overload scenario. Expects BACKEND, FAST, LOG
# and BACKEND_LIFETIME (how long a backend lives, e.g. 200s) to be set.

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

# wait_up URL: wait until URL answers 2xx (10 s at most).
wait_up() {
  for _ in $(seq 100); do curl -sf "$1" >/dev/null && return; sleep 0.1; done
  echo "$1 did not come up" >&2; exit 1
}

# start_backends: the queueing backend (5 workers × 50 ms) on BACKEND and a
# fast one on FAST.
start_backends() {
  bin/demo-backend -listen "$BACKEND" -latency 50ms -slots 5 -thrash 2 -queue-timeout 1s -duration "$BACKEND_LIFETIME" >"$LOG-backend.log" 2>&1 &
  pids+=($!)
  bin/demo-backend -listen "$FAST" -duration "$BACKEND_LIFETIME" >"$LOG-fast.log" 2>&1 &
  pids+=($!)
  wait_up "http://$BACKEND/healthz"; wait_up "http://$FAST/healthz"
}
