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
# Then the bare fasthttp proxy (bench/bareproxy, the floor of bench-compare)
# gets the same load and profile, and bin/profile-diff.txt holds Sentinel
# minus the floor per function: flat CPU in microseconds per request (each
# profile's samples over the requests wrk counted in its run).
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
go build -o bin/bareproxy ./bench/bareproxy

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

# The floor under the same load: wrk for PROFILE_SECONDS+2 s, the profile
# in the middle.
timeout "$BENCH_MAX" bin/bareproxy -listen "$HOST:$BARE_PORT" -upstream "$HOST:$BACKEND_PORT" -pprof "$HOST:$PPROF_PORT" >"$tmp/bare.log" 2>&1 &
bare_pid=$!; pids+=("$bare_pid")
wait_for "http://$HOST:$BARE_PORT/"
wrk -t2 -c64 -d1s -s bench/proxy.lua "http://$HOST:$BARE_PORT/" >/dev/null # warm-up
wrk -t2 -c64 -d"$((PROFILE_SECONDS + 2))s" -s bench/proxy.lua "http://$HOST:$BARE_PORT/" >"$tmp/wrk-bare.txt" &
wrk_pid=$!; pids+=("$wrk_pid")
sleep 0.5
curl -sf -o bin/profile-bare-cpu.pb.gz "$pprof/profile?seconds=$PROFILE_SECONDS"
wait "$wrk_pid"
kill "$bare_pid" 2>/dev/null || true

go tool pprof -top -nodecount=40 bin/sentinel bin/profile-cpu.pb.gz >bin/profile-cpu.txt 2>/dev/null
go tool pprof -top -cum -nodecount=150 bin/sentinel bin/profile-cpu.pb.gz >bin/profile-cpu-cum.txt 2>/dev/null
go tool pprof -top -nodecount=40 -sample_index=alloc_space bin/sentinel bin/profile-allocs.pb.gz >bin/profile-allocs.txt 2>/dev/null
go tool pprof -top -nodecount=40 -sample_index=alloc_objects bin/sentinel bin/profile-allocs.pb.gz >bin/profile-allocs-objects.txt 2>/dev/null

# per_request PROFILE WRK_OUTPUT: "function<TAB>flat µs per request" for
# every function of the profile (its requests: wrk's rate × the profile's
# seconds).
export LC_ALL=C # sort and join agree on the order
per_request() {
  local rate
  rate=$(sed -nE 's/^BENCH requests=([0-9]+) duration_us=([0-9]+).*/\1 \2/p' "$2" | awk '{print $1 * 1e6 / $2}')
  go tool pprof -top -nodefraction=0 -nodecount=100000 -unit=ms "$1" 2>/dev/null |
    awk -v n="$rate * $PROFILE_SECONDS" -v rate="$rate" -v secs="$PROFILE_SECONDS" '
      $1 ~ /^[0-9.]+(ms)?$/ && $2 ~ /%$/ { v = $1; sub("ms", "", v); f = $6; for (i = 7; i <= NF; i++) f = f " " $i
        printf "%s\t%.4f\n", f, v * 1000 / (rate * secs) }'
}
per_request bin/profile-cpu.pb.gz "$tmp/wrk.txt" | sort >"$tmp/sentinel.us"
per_request bin/profile-bare-cpu.pb.gz "$tmp/wrk-bare.txt" | sort >"$tmp/bare.us"
{
  printf '%10s %10s %10s  %s\n' sentinel bare minus function
  join -t "$(printf '\t')" -a1 -a2 -e 0 -o 0,1.2,2.2 "$tmp/sentinel.us" "$tmp/bare.us" |
    awk -F'\t' '{ printf "%10.3f %10.3f %+10.3f  %s\n", $2, $3, $2 - $3, $1; s += $2; b += $3 }
      END { printf "%10.3f %10.3f %+10.3f  %s\n", s, b, s - b, "(all functions)" }' | sort -k3 -gr
} >bin/profile-diff.txt

line=$(grep '^BENCH ' "$tmp/wrk.txt")
echo "load: ${line#BENCH }"
bline=$(grep '^BENCH ' "$tmp/wrk-bare.txt")
echo "bare proxy, same load: ${bline#BENCH }"
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
echo
echo "## Sentinel minus the bare proxy, flat CPU µs per request (bin/profile-diff.txt, top $TOP)"
head -n "$((TOP + 1))" bin/profile-diff.txt
