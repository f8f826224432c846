#!/usr/bin/env bash
# make bench-compare: Sentinel against nginx and HAProxy on this machine, side
# by side.
#
# One upstream (the demo backend's fixed 64-byte answer), two more for the
# rows of large answers (64 KiB, 10 MiB), one nginx
# (bench/nginx.conf), one HAProxy (bench/haproxy.cfg; its rows are skipped,
# saying so, when the haproxy package cannot be installed), two bare fasthttp proxies (bench/bareproxy: the floor of
# Sentinel's HTTP stack, with a connection per request in flight and with one
# pipelined connection; the first also at one client connection, the floor
# of the -c1 rows; two more for the large answers, reading 64 KiB answers
# whole and streaming 10 MiB ones), one bare fasthttp server that answers 429 itself (the
# floor of the refusal path), the same two writing Sentinel's default
# headers as constants (bareproxy -headers: the floor of a gateway that
# writes them, whatever it decides) and one redis-server run for the whole benchmark; a fresh
# Sentinel (bench/sentinel.yaml plus the environment of its row) starts for
# each run. Every configuration runs once per round, rounds interleaved
# (ROUNDS=3), each run a WARMUP then DURATION seconds of wrk (the references,
# which run for the whole benchmark, warm up in the first round only). Per
# run it keeps req/s, p50, p99, the answers of status >= 400, the CPU time of each
# process (/proc/PID/stat before and after) and the gateway's peak resident
# memory (sampled every 100 ms from before the warm-up; a 10 MiB answer held
# whole by 64 connections would show as 640 MiB); the rows of large answers
# run BIG_DURATION seconds, warmed up in round 1 only. The table gives the median over
# rounds, with the ratios to the row's references taken within each round
# (nginx, HAProxy, and the floor: the bare proxy for proxy rows, the bare 429
# server for refusal and check API rows), and,
# for Sentinel, its limit-store calls per request and the share of them not
# answered (timed out, failed, or skipped by the open store breaker: those
# decisions were the local share's, limits.on_store_failure).
# Everything listens on 127.0.0.1 and stops by itself. About 6 minutes.
# ONLY='nginx|sentinel' runs only the rows so named (quick comparisons).
# BASE=<git revision> also builds Sentinel at that revision and runs each
# Sentinel row with it too ("name@base" rows, in the same rounds): a change
# measured before and after on the same machine in the same hour.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-4}   # seconds measured per run (21 rows × 3 rounds: about 5 minutes)
BIG_DURATION=${BIG_DURATION:-2}  # seconds measured per run of the large-answer rows (6 rows × 3 rounds: about 40 s)
WARMUP=${WARMUP:-1}       # seconds of load before each measurement
THREADS=${THREADS:-2}
CONNS=${CONNS:-64}
ONLY=${ONLY:-}            # an extended regex: run only the rows whose name matches it
BASE=${BASE:-}            # a git revision to measure beside the working tree
export BENCH_DIR=bench
source bench/lib.sh

need wrk wrk
need nginx nginx-light
need redis-server redis-server
need redis-cli redis-tools
haproxy=yes
want haproxy haproxy || { haproxy=; echo "bench-compare: haproxy is missing and the haproxy package could not be installed: skipping the HAProxy rows" >&2; }
mkdir -p bin
go build -o bin/sentinel .
if [ -n "$BASE" ]; then
  base_src=$(mktemp -d)
  git archive --format=tar "$BASE" | tar -x -C "$base_src"
  (cd "$base_src" && go build -o "$OLDPWD/bin/sentinel-base" .)
  rm -rf "$base_src"
fi
go build -o bin/demo-backend ./loadtest/backend
go build -o bin/bench-table ./bench/table
go build -o bin/bareproxy ./bench/bareproxy

REDIS="SENTINEL_REDIS_ADDRS=$HOST:$REDIS_PORT"
# The large-answer rows' upstream, without health checks: the demo backend
# answers /healthz with its large answer too, which the checks read whole.
UP64K="SENTINEL_UPSTREAMS_API_TARGETS=http://$HOST:$BACKEND_64K_PORT SENTINEL_UPSTREAMS_API_HEALTH_CHECK_PATH="
UP10M="SENTINEL_UPSTREAMS_API_TARGETS=http://$HOST:$BACKEND_10M_PORT SENTINEL_UPSTREAMS_API_HEALTH_CHECK_PATH="
REFUSE="SENTINEL_LIMITS_TENANT=99 SENTINEL_LIMITS_API_KEY=0 SENTINEL_LIMITS_IP=0"
# name | label | references: nginx, floor, HAProxy (- none) | target | wrk script | threads | conns | Sentinel environment
runs=(
  "nginx|nginx 1.22, proxy|nginx|bare|haproxy|nginx:$NGINX_PROXY_PORT|proxy.lua|$THREADS|$CONNS|"
  "haproxy|HAProxy 2.6, proxy|nginx|bare|haproxy|haproxy:$HAPROXY_PROXY_PORT|proxy.lua|$THREADS|$CONNS|"
  "bare|bare fasthttp proxy (no limits, headers or metrics)|nginx|bare|haproxy|bare|proxy.lua|$THREADS|$CONNS|"
  "bare-headers|bare fasthttp proxy + Sentinel's default headers (constants)|nginx|bare|haproxy|bare-headers|proxy.lua|$THREADS|$CONNS|"
  "sentinel|Sentinel, proxy, default (memory store, adaptive on)|nginx|bare|haproxy|proxy|proxy.lua|$THREADS|$CONNS|"
  "bare-pipe|bare fasthttp proxy, pipelined (1 connection)|nginx|bare-pipe|haproxy|bare-pipe|proxy.lua|$THREADS|$CONNS|"
  "pipeline|Sentinel, proxy, default + upstream pipeline: 1|nginx|bare-pipe|haproxy|proxy|proxy.lua|$THREADS|$CONNS|SENTINEL_UPSTREAMS_API_PIPELINE=1"
  "no-adaptive|Sentinel, proxy, adaptive.enabled false|nginx|bare|haproxy|proxy|proxy.lua|$THREADS|$CONNS|SENTINEL_ADAPTIVE_ENABLED=false"
  "redis|Sentinel, proxy, Redis store (leases), adaptive on|nginx|bare|haproxy|proxy|proxy.lua|$THREADS|$CONNS|$REDIS"
  "nginx-refuse|nginx 1.22, limit_req 100 r/s (nearly all refused)|nginx-refuse|bare-refuse|haproxy-refuse|nginx:$NGINX_LIMIT_PORT|proxy.lua|$THREADS|$CONNS|"
  "haproxy-refuse|HAProxy 2.6, stick table 100 r/s (nearly all refused)|nginx-refuse|bare-refuse|haproxy-refuse|haproxy:$HAPROXY_LIMIT_PORT|proxy.lua|$THREADS|$CONNS|"
  "bare-refuse|bare fasthttp server answering every request 429 itself|nginx-refuse|bare-refuse|haproxy-refuse|bare-refuse|proxy.lua|$THREADS|$CONNS|"
  "bare-refuse-headers|bare 429 server + Sentinel's headers and body (constants)|nginx-refuse|bare-refuse|haproxy-refuse|bare-refuse-headers|proxy.lua|$THREADS|$CONNS|"
  "refuse|Sentinel, tenant limit 99/s (nearly all refused), memory|nginx-refuse|bare-refuse|haproxy-refuse|proxy|proxy.lua|$THREADS|$CONNS|$REFUSE"
  "refuse-redis|Sentinel, tenant limit 99/s (nearly all refused), Redis|nginx-refuse|bare-refuse|haproxy-refuse|proxy|proxy.lua|$THREADS|$CONNS|$REFUSE $REDIS"
  "check-hot|Sentinel check API, one hot key, Redis|nginx|bare-refuse|haproxy|admin|check_hot.lua|$THREADS|$CONNS|$REDIS"
  "check-10k|Sentinel check API, 10k keys, Redis|nginx|bare-refuse|haproxy|admin|check_10k.lua|$THREADS|$CONNS|$REDIS"
  "check-10k-wait|Sentinel check API, 10k keys, Redis, store_timeout 50ms|nginx|bare-refuse|haproxy|admin|check_10k.lua|$THREADS|$CONNS|$REDIS SENTINEL_LIMITS_STORE_TIMEOUT=50ms"
  "nginx-c1|nginx 1.22, proxy, 1 connection|nginx-c1|bare-c1|-|nginx:$NGINX_PROXY_PORT|proxy.lua|1|1|"
  "bare-c1|bare fasthttp proxy, 1 connection|nginx-c1|bare-c1|-|bare|proxy.lua|1|1|"
  "sentinel-c1|Sentinel, proxy, default, 1 connection|nginx-c1|bare-c1|-|proxy|proxy.lua|1|1|"
  "nginx-64k|nginx 1.22, proxy, 64 KiB answers|nginx-64k|bare-64k|-|nginx:$NGINX_64K_PORT|proxy.lua|$THREADS|$CONNS|"
  "bare-64k|bare fasthttp proxy, 64 KiB answers (read whole)|nginx-64k|bare-64k|-|bare-64k|proxy.lua|$THREADS|$CONNS|"
  "sentinel-64k|Sentinel, proxy, default, 64 KiB answers|nginx-64k|bare-64k|-|proxy|proxy.lua|$THREADS|$CONNS|$UP64K"
  "nginx-10m|nginx 1.22, proxy, 10 MiB answers|nginx-10m|bare-10m|-|nginx:$NGINX_10M_PORT|proxy.lua|$THREADS|$CONNS|"
  "bare-10m|bare fasthttp proxy, 10 MiB answers (streamed)|nginx-10m|bare-10m|-|bare-10m|proxy.lua|$THREADS|$CONNS|"
  "sentinel-10m|Sentinel, proxy, default, 10 MiB answers|nginx-10m|bare-10m|-|proxy|proxy.lua|$THREADS|$CONNS|$UP10M"
)

start_backend "$BACKEND_64K_PORT" $((64 << 10)); backend_64k_pid=$backend_pid
start_backend "$BACKEND_10M_PORT" $((10 << 20)); backend_10m_pid=$backend_pid
start_backend
timeout "$BENCH_MAX" redis-server --bind "$HOST" --port "$REDIS_PORT" --save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
redis_pid=$!; pids+=("$redis_pid")
sed -e "s|@TMP@|$tmp|g" -e "s|@BACKEND@|$HOST:$BACKEND_PORT|g" \
    -e "s|@PROXY@|$HOST:$NGINX_PROXY_PORT|g" -e "s|@LIMIT@|$HOST:$NGINX_LIMIT_PORT|g" \
    -e "s|@BACKEND64K@|$HOST:$BACKEND_64K_PORT|g" -e "s|@PROXY64K@|$HOST:$NGINX_64K_PORT|g" \
    -e "s|@BACKEND10M@|$HOST:$BACKEND_10M_PORT|g" -e "s|@PROXY10M@|$HOST:$NGINX_10M_PORT|g" bench/nginx.conf >"$tmp/nginx.conf"
timeout "$BENCH_MAX" nginx -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log" &
nginx_pid=$!; pids+=("$nginx_pid")
wait_for "http://$HOST:$NGINX_PROXY_PORT/"
if [ -n "$haproxy" ]; then
  sed -e "s|@TMP@|$tmp|g" -e "s|@BACKEND@|$HOST:$BACKEND_PORT|g" \
      -e "s|@PROXY@|$HOST:$HAPROXY_PROXY_PORT|g" -e "s|@LIMIT@|$HOST:$HAPROXY_LIMIT_PORT|g" bench/haproxy.cfg >"$tmp/haproxy.cfg"
  timeout "$BENCH_MAX" haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
  haproxy_pid=$!; pids+=("$haproxy_pid")
  wait_for "http://$HOST:$HAPROXY_PROXY_PORT/"
fi
timeout "$BENCH_MAX" bin/bareproxy -listen "$HOST:$BARE_PORT" -upstream "$HOST:$BACKEND_PORT" >"$tmp/bare.log" 2>&1 &
bare_pid=$!; pids+=("$bare_pid")
wait_for "http://$HOST:$BARE_PORT/"
timeout "$BENCH_MAX" bin/bareproxy -pipeline 1 -listen "$HOST:$BARE_PIPE_PORT" -upstream "$HOST:$BACKEND_PORT" >"$tmp/bare-pipe.log" 2>&1 &
bare_pipe_pid=$!; pids+=("$bare_pipe_pid")
wait_for "http://$HOST:$BARE_PIPE_PORT/"
timeout "$BENCH_MAX" bin/bareproxy -listen "$HOST:$BARE_64K_PORT" -upstream "$HOST:$BACKEND_64K_PORT" >"$tmp/bare-64k.log" 2>&1 &
bare_64k_pid=$!; pids+=("$bare_64k_pid")
wait_for "http://$HOST:$BARE_64K_PORT/"
timeout "$BENCH_MAX" bin/bareproxy -stream -listen "$HOST:$BARE_10M_PORT" -upstream "$HOST:$BACKEND_10M_PORT" >"$tmp/bare-10m.log" 2>&1 &
bare_10m_pid=$!; pids+=("$bare_10m_pid")
wait_for "http://$HOST:$BARE_10M_PORT/"
timeout "$BENCH_MAX" bin/bareproxy -refuse -listen "$HOST:$BARE_REFUSE_PORT" >"$tmp/bare-refuse.log" 2>&1 &
bare_refuse_pid=$!; pids+=("$bare_refuse_pid")
for _ in $(seq 100); do curl -s -o /dev/null "http://$HOST:$BARE_REFUSE_PORT/" && break; sleep 0.1; done
timeout "$BENCH_MAX" bin/bareproxy -headers -listen "$HOST:$BARE_HEADERS_PORT" -upstream "$HOST:$BACKEND_PORT" >"$tmp/bare-headers.log" 2>&1 &
bare_headers_pid=$!; pids+=("$bare_headers_pid")
wait_for "http://$HOST:$BARE_HEADERS_PORT/"
timeout "$BENCH_MAX" bin/bareproxy -refuse -headers -listen "$HOST:$BARE_REFUSE_HEADERS_PORT" >"$tmp/bare-refuse-headers.log" 2>&1 &
bare_refuse_headers_pid=$!; pids+=("$bare_refuse_headers_pid")
for _ in $(seq 100); do curl -s -o /dev/null "http://$HOST:$BARE_REFUSE_HEADERS_PORT/" && break; sleep 0.1; done
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

results=bin/bench-compare.tsv
printf 'round\tname\tlabel\tbaseline\tfloor\thaproxy\trequests\tduration_us\tp50_us\tp99_us\tnon2xx\tsockerr\tgateway_ms\tbackend_ms\tredis_ms\twrk_ms\tmodes\tstore_calls\tstore_unanswered\tgateway_rss_kb\n' >"$results"
ms() { echo $(( ($1) * 1000 / CLK_TCK )); }
# store_calls prints the gateway's limit-store calls so far: answered, and
# not (timed out, failed, or skipped while the store breaker was open: those
# decisions fell to limits.on_store_failure).
store_calls() {
  curl -sf "http://$HOST:$ADMIN_PORT/metrics" | awk '/^sentinel_limit_store_calls_total/ {
    if ($1 ~ /result="ok"/) ok += $2; else bad += $2 } END { print ok + 0, bad + 0 }'
}

run_one() {
  local round=$1 name label baseline floor hap target script threads conns envs url gw
  IFS='|' read -r name label baseline floor hap target script threads conns envs <<<"$2"
  # The large-answer rows: their own backend, BIG_DURATION, and a wrk
  # timeout that a 10 MiB answer through a loaded machine does not reach.
  local duration=$DURATION backend=$backend_pid wrk_timeout=2s
  case $name in
    *-64k*) duration=$BIG_DURATION; backend=$backend_64k_pid; wrk_timeout=10s ;;
    *-10m*) duration=$BIG_DURATION; backend=$backend_10m_pid; wrk_timeout=10s ;;
  esac
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  sentinel_log=$tmp/sentinel-$name-$round.log
  case $target in
    nginx:*) url="http://$HOST:${target#nginx:}/"; gw=$nginx_pid ;;
    haproxy:*) url="http://$HOST:${target#haproxy:}/"; gw=$haproxy_pid ;;
    bare) url="http://$HOST:$BARE_PORT/"; gw=$bare_pid ;;
    bare-pipe) url="http://$HOST:$BARE_PIPE_PORT/"; gw=$bare_pipe_pid ;;
    bare-refuse) url="http://$HOST:$BARE_REFUSE_PORT/"; gw=$bare_refuse_pid ;;
    bare-headers) url="http://$HOST:$BARE_HEADERS_PORT/"; gw=$bare_headers_pid ;;
    bare-refuse-headers) url="http://$HOST:$BARE_REFUSE_HEADERS_PORT/"; gw=$bare_refuse_headers_pid ;;
    bare-64k) url="http://$HOST:$BARE_64K_PORT/"; gw=$bare_64k_pid ;;
    bare-10m) url="http://$HOST:$BARE_10M_PORT/"; gw=$bare_10m_pid ;;
    proxy*) url="http://$HOST:$SENTINEL_PORT/" ;;&
    admin*) url="http://$HOST:$ADMIN_PORT/" ;;&
    *@base) SENTINEL_BIN=bin/sentinel-base ;;&
    proxy* | admin*) read -ra e <<<"$envs"; start_sentinel "${e[@]}"; gw=$sentinel_pid; SENTINEL_BIN= ;;
  esac
  local rss_file=$tmp/rss-$name-$round sampler
  echo 0 >"$rss_file"
  peak_rss "$gw" "$rss_file" &
  sampler=$!
  # Warm-up: every run of round 1, and each fresh Sentinel's, but not those
  # of the large-answer rows (their 2 s cover a start; they stay near 40 s).
  case $round:$target:$duration in 1:* | *:proxy*:$DURATION | *:admin*) wrk -t"$threads" -c"$conns" -d"${WARMUP}s" -s "bench/$script" "$url" >/dev/null ;; esac
  local g0 b0 r0 w0 g1 b1 r1 w1 out
  local s0=(0 0) s1=(0 0)
  case $target in proxy* | admin*) read -ra s0 <<<"$(store_calls)" ;; esac
  g0=$(ticks "$gw"); b0=$(ticks "$backend"); r0=$(ticks "$redis_pid"); w0=$(waited_ticks)
  out=$(wrk -t"$threads" -c"$conns" -d"${duration}s" --timeout "$wrk_timeout" -s "bench/$script" "$url")
  g1=$(ticks "$gw"); b1=$(ticks "$backend"); r1=$(ticks "$redis_pid"); w1=$(waited_ticks)
  kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true
  case $target in proxy* | admin*) read -ra s1 <<<"$(store_calls)"; stop_sentinel ;; esac
  local line; line=$(grep '^BENCH ' <<<"$out") || { echo "$name: wrk printed no result:"; echo "$out"; exit 1; } >&2
  local requests duration_us p50_us p99_us non2xx sockerr modes=-
  eval "$(sed -e 's/^BENCH //' <<<"$line")"
  # The adaptive modes the gateway entered (its log: "adaptive: mode normal → moderate ...").
  [ -f "$sentinel_log" ] && modes=$( { grep -o 'adaptive: mode [a-z]* → [a-z]*' "$sentinel_log" || true; } | awk '{print $5}' | sort -u | paste -sd, -)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$label" "$baseline" "$floor" "$hap" \
    "$requests" "$duration_us" "$p50_us" "$p99_us" "$non2xx" "$sockerr" \
    "$(ms "g1 - g0")" "$(ms "b1 - b0")" "$(ms "r1 - r0")" "$(ms "w1 - w0")" "${modes:--}" \
    "$((s1[0] + s1[1] - s0[0] - s0[1]))" "$((s1[1] - s0[1]))" "$(<"$rss_file")" >>"$results"
  printf '  round %s %-13s %8d req/s  p99 %6.2f ms  >=400: %-7d peak RSS %4d MiB  modes: %s\n' "$round" "$name" \
    $((requests * 1000000 / duration_us)) "$(awk "BEGIN{print $p99_us/1000}")" "$non2xx" $(($(<"$rss_file") / 1024)) "${modes:--}" >&2
}

if [ -z "$haproxy" ]; then
  kept=(); for r in "${runs[@]}"; do [[ ${r%%|*} == haproxy* ]] || kept+=("$r"); done; runs=("${kept[@]}")
fi
if [ -n "$ONLY" ]; then
  kept=(); for r in "${runs[@]}"; do [[ ${r%%|*} =~ ^($ONLY)$ ]] && kept+=("$r"); done; runs=("${kept[@]}")
fi
if [ -n "$BASE" ]; then
  kept=()
  for r in "${runs[@]}"; do
    kept+=("$r")
    IFS='|' read -r name label baseline floor hap target rest <<<"$r"
    case $target in proxy | admin) kept+=("$name@base|$label, at $BASE|$baseline|$floor|$hap|$target@base|$rest") ;; esac
  done
  runs=("${kept[@]}")
fi
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench-compare: $ROUNDS rounds × ${#runs[@]} runs of ${WARMUP}+${DURATION}s; load average at start: $load_start" >&2
for round in $(seq "$ROUNDS"); do
  for r in "${runs[@]}"; do run_one "$round" "$r"; done
done

{
  refs=$(nginx -v 2>&1 | cut -d' ' -f3)
  [ -z "$haproxy" ] || refs="$refs and HAProxy $(haproxy -v | awk 'NR == 1 {print $3}')"
  echo "## bench-compare: Sentinel $(git describe --tags --always --dirty 2>/dev/null) vs $refs"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr), $(go version | cut -d' ' -f3)."
  echo "wrk -t$THREADS -c$CONNS (rows marked 1 connection: -t1 -c1), ${DURATION} s after ${WARMUP} s of warm-up (the references: in round 1 only), $ROUNDS interleaved rounds, medians;"
  echo "upstream: demo-backend -fixed-body 64 (the rows of 64 KiB and 10 MiB answers: -fixed-body 65536 and 10485760, ${BIG_DURATION} s each). Load average at the start: $load_start; at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  bin/bench-table <"$results"
} | tee bin/bench-compare.md
