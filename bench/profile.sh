#!/usr/bin/env bash
# make profile: CPU and allocation profiles of the proxy path. The demo
# backend's fixed 64-byte answer, Sentinel on bench/sentinel.yaml (the
# defaults: memory store, adaptive on) with -pprof on a loopback port, and
# wrk -t2 -c64 for SECONDS+2 s; meanwhile a SECONDS-long CPU profile and the
# allocations made in the same SECONDS (a delta of the allocs profile).
# Writes bin/profile-{cpu,allocs}.pb.gz and the `go tool pprof -top` output
# next to them (profile-cpu-cum.txt sorted by cumulative time), and prints the top entries. Everything stops by itself.
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
start_sentinel -- -pprof "$HOST:$PPROF_PORT"
pprof="http://$HOST:$PPROF_PORT/debug/pprof"
wrk -t2 -c64 -d1s -s bench/proxy.lua "http://$HOST:$SENTINEL_PORT/" >/dev/null # warm-up
wrk -t2 -c64 -d"$((PROFILE_SECONDS + 2))s" -s bench/proxy.lua "http://$HOST:$SENTINEL_PORT/" >"$tmp/wrk.txt" &
wrk_pid=$!; pids+=("$wrk_pid")
sleep 0.5
curl -sf -o bin/profile-cpu.pb.gz "$pprof/profile?seconds=$PROFILE_SECONDS" &
cpu_pid=$!
curl -sf -o bin/profile-allocs.pb.gz "$pprof/allocs?seconds=$PROFILE_SECONDS"
wait "$cpu_pid"
wait "$wrk_pid"
stop_sentinel

go tool pprof -top -nodecount=40 bin/sentinel bin/profile-cpu.pb.gz >bin/profile-cpu.txt 2>/dev/null
go tool pprof -top -cum -nodecount=60 bin/sentinel bin/profile-cpu.pb.gz >bin/profile-cpu-cum.txt 2>/dev/null
go tool pprof -top -nodecount=40 -sample_index=alloc_space bin/sentinel bin/profile-allocs.pb.gz >bin/profile-allocs.txt 2>/dev/null
go tool pprof -top -nodecount=40 -sample_index=alloc_objects bin/sentinel bin/profile-allocs.pb.gz >bin/profile-allocs-objects.txt 2>/dev/null

grep '^BENCH ' "$tmp/wrk.txt" | sed 's/^BENCH /load: /'
for f in cpu cpu-cum allocs allocs-objects; do
  echo
  echo "## bin/profile-$f.txt (top $TOP; flat = in the function itself, cum = with its callees)"
  sed -n '1,/flat%/p' "bin/profile-$f.txt" | grep -v '^File:\|^Build ID:'
  sed -n '/flat%/,$p' "bin/profile-$f.txt" | sed -n "2,$((TOP + 1))p"
done
