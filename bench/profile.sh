#!/usr/bin/env bash
# make profile: CPU and allocation profiles of the proxy path. The demo
# backend's fixed 64-byte answer, Sentinel on bench/sentinel.yaml (the
# defaults: memory store, adaptive on) with -pprof on a loopback port, and
# wrk -t2 -c64 for SECONDS+2 s; meanwhile a SECONDS-long CPU profile and the
# allocations made in the same SECONDS (a delta of the allocs profile).
# Writes bin/profile-{cpu,allocs}.pb.gz and the `go tool pprof -top` output
# next to them (profile-cpu-cum.txt sorted by cumulative time), and prints the top entries. Everything stops by itself.
# PROFILE_ENV adds Sentinel environment, e.g.
# PROFILE_ENV=SENTINEL_UPSTREAMS_API_PIPELINE=1 make profile (a pipelined upstream).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE_SECONDS=${PROFILE_SECONDS:-10}
TOP=${TOP:-15}
export BENCH_DIR=bench
source bench/lib.sh

need wrk wrk
mkdir -p bin
go build -o bin/sentinel .   # not stripped: pprof -top names every function
go build -o bin/demo-backend ./loadtest/backend

start_backend
read -ra profile_env <<<"${PROFILE_ENV:-}"
start_sentinel "${profile_env[@]}" -- -pprof "$HOST:$PPROF_PORT"
pprof="http://$HOST:$PPROF_PORT/debug/pprof"
wrk -t2 -c64 -d1s -s bench/proxy.lua "http://$HOST:$SENTINEL_PORT/" >/dev/null # warm-up
# Heap allocations of the whole process (go_memstats_mallocs_total) over 3 s
# of the same load without the profilers: the request path's allocations under
# real concurrency, where the 0-alloc tests run one request at a time.
mallocs() { curl -sf "http://$HOST:$ADMIN_PORT/metrics" | awk '/^go_memstats_mallocs_total /{print $2}'; }
store_calls() { curl -sf "http://$HOST:$ADMIN_PORT/metrics" | awk '/^sentinel_limit_store_calls_total/{n += $2} END {print n + 0}'; }
m0=$(mallocs); s0=$(store_calls)
alloc_line=$(wrk -t2 -c64 -d3s -s bench/proxy.lua "http://$HOST:$SENTINEL_PORT/" | grep '^BENCH ')
m1=$(mallocs); s1=$(store_calls)
wrk -t2 -c64 -d"$((PROFILE_SECONDS + 2))s" -s bench/proxy.lua "http://$HOST:$SENTINEL_PORT/" >"$tmp/wrk.txt" &
wrk_pid=$!; pids+=("$wrk_pid")
sleep 0.5
curl -sf -o bin/profile-cpu.pb.gz "$pprof/profile?seconds=$PROFILE_SECONDS" &
cpu_pid=$!
curl -sf -o bin/profile-allocs.pb.gz "$pprof/allocs?seconds=$PROFILE_SECONDS"
wait "$cpu_pid"
wait "$wrk_pid"
m2=$(mallocs); s2=$(store_calls)
stop_sentinel

go tool pprof -top -nodecount=40 bin/sentinel bin/profile-cpu.pb.gz >bin/profile-cpu.txt 2>/dev/null
go tool pprof -top -cum -nodecount=150 bin/sentinel bin/profile-cpu.pb.gz >bin/profile-cpu-cum.txt 2>/dev/null
go tool pprof -top -nodecount=40 -sample_index=alloc_space bin/sentinel bin/profile-allocs.pb.gz >bin/profile-allocs.txt 2>/dev/null
go tool pprof -top -nodecount=40 -sample_index=alloc_objects bin/sentinel bin/profile-allocs.pb.gz >bin/profile-allocs-objects.txt 2>/dev/null

line=$(grep '^BENCH ' "$tmp/wrk.txt")
echo "load: ${line#BENCH }"
requests=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$alloc_line")
echo "heap allocations per request: $(awk "BEGIN{printf \"%.2f\", ($m1 - $m0) / $requests}") (go_memstats_mallocs_total over 3 s of the load before profiling, $requests requests)"
echo "limit store calls per request: $(awk "BEGIN{printf \"%.3f\", ($s1 - $s0) / $requests}") (sentinel_limit_store_calls_total, same 3 s)"
requests2=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$line")
echo "during the profiles: $(awk "BEGIN{printf \"%.2f heap allocations and %.3f store calls per request\", ($m2 - $m1) / $requests2, ($s2 - $s1) / $requests2}") (profile handlers included)"
echo "adaptive modes entered: $( { grep -o 'adaptive: mode [a-z]* → [a-z]*.*' "$tmp/sentinel.log" || echo none; } | sed 's/^adaptive: //' | paste -sd';' -)"
for f in cpu cpu-cum allocs allocs-objects; do
  echo
  echo "## bin/profile-$f.txt (top $TOP; flat = in the function itself, cum = with its callees)"
  sed -n '1,/flat%/p' "bin/profile-$f.txt" | grep -v '^File:\|^Build ID:'
  sed -n '/flat%/,$p' "bin/profile-$f.txt" | sed -n "2,$((TOP + 1))p"
done
echo
echo "## Sentinel's own functions by cumulative CPU (bin/profile-cpu-cum.txt)"
grep 'sentinel-gateway/sentinel/' bin/profile-cpu-cum.txt | head -n "$TOP"
