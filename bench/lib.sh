# Helpers shared by bench/compare.sh and bench/profile.sh (sourced, not run).
# Every process runs under `timeout`, so it stops by itself even if the
# script is killed; the EXIT trap stops the rest and removes the temp dir.

BENCH_MAX=${BENCH_MAX:-15m}   # the longest any started process may live
HOST=127.0.0.1
BACKEND_PORT=29100
BACKEND_64K_PORT=29101
BACKEND_10M_PORT=29102
SENTINEL_PORT=29280
ADMIN_PORT=29290
REDIS_PORT=29379
NGINX_PROXY_PORT=29180
NGINX_LIMIT_PORT=29181
HAPROXY_PROXY_PORT=29182
HAPROXY_LIMIT_PORT=29183
NGINX_64K_PORT=29184
NGINX_10M_PORT=29185
PPROF_PORT=29260
BARE_PORT=29380
BARE_REFUSE_PORT=29381
BARE_PIPE_PORT=29382
BARE_64K_PORT=29383
BARE_10M_PORT=29384
BARE_HEADERS_PORT=29385
BARE_REFUSE_HEADERS_PORT=29386
CLK_TCK=$(getconf CLK_TCK)

pids=()
tmp=$(mktemp -d /tmp/sentinel-bench.XXXXXX)
chmod 755 "$tmp" # nginx's workers run as nobody when started by root
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# need installs the Debian package $2 when the command $1 is missing, and
# stops the script when that does not provide it.
need() {
  want "$1" "$2" || { echo "$1 is missing and $2 did not provide it" >&2; exit 1; }
}

# want is need for an optional command: it returns 1 when $1 is still
# missing after trying to install $2, and the caller skips what needs it.
want() {
  command -v "$1" >/dev/null && return
  echo "installing $2 (for $1)" >&2
  export DEBIAN_FRONTEND=noninteractive
  if [ "$(id -u)" = 0 ]; then apt-get install -y -q "$2" >/dev/null; else sudo apt-get install -y -q "$2" >/dev/null; fi || true
  command -v "$1" >/dev/null
}

# wait_for URL: up to 10 s for URL to answer 2xx.
wait_for() {
  for _ in $(seq 100); do curl -sf -o /dev/null "$1" && return; sleep 0.1; done
  echo "no answer from $1" >&2; exit 1
}

# ticks PID: CPU time (user + system, clock ticks) of PID and every live
# descendant, from /proc/PID/stat. A `timeout` wrapper costs nothing, so the
# tree under it is the wrapped process (nginx: the master and its workers).
ticks() {
  local pid=$1 total=0 stat rest f c
  [ -r "/proc/$pid/stat" ] || { echo 0; return; }
  stat=$(<"/proc/$pid/stat"); rest=${stat##*) }; read -ra f <<<"$rest"
  total=$((f[11] + f[12]))
  for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do total=$((total + $(ticks "$c"))); done
  echo "$total"
}

# waited_ticks: CPU time of the children this shell has waited for (wrk).
waited_ticks() {
  local stat rest f
  stat=$(<"/proc/$$/stat"); rest=${stat##*) }; read -ra f <<<"$rest"
  echo $((f[13] + f[14]))
}

# rss_kb PID: resident memory (KiB) of PID and every live descendant, from
# /proc/PID/status (nginx: the master and its workers).
rss_kb() {
  local pid=$1 total=0 k v _ c
  [ -r "/proc/$pid/status" ] || { echo 0; return; }
  while read -r k v _; do [ "$k" = VmRSS: ] && total=$v; done <"/proc/$pid/status"
  for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do total=$((total + $(rss_kb "$c"))); done
  echo "$total"
}

# peak_rss PID FILE: samples rss_kb PID every 100 ms until killed, keeping
# the largest in FILE (replaced by a rename: a kill never leaves it empty).
peak_rss() {
  local peak=0 now
  while :; do
    now=$(rss_kb "$1")
    if [ "$now" -gt "$peak" ]; then peak=$now; echo "$peak" >"$2.new"; mv -f "$2.new" "$2"; fi
    sleep 0.1
  done
}

# start_backend [PORT SIZE]: a demo backend answering SIZE bytes (default: the
# 64-byte answer on BACKEND_PORT); sets backend_pid.
start_backend() {
  local port=${1:-$BACKEND_PORT} size=${2:-64}
  timeout "$BENCH_MAX" bin/demo-backend -listen "$HOST:$port" -fixed-body "$size" >"$tmp/backend-$port.log" 2>&1 &
  backend_pid=$!; pids+=("$backend_pid")
  wait_for "http://$HOST:$port/healthz"
}

# start_sentinel [VAR=value...] [-- flags]: a gateway ($SENTINEL_BIN, by default
# bin/sentinel) on bench/sentinel.yaml with these environment overrides,
# logging to $sentinel_log; sets sentinel_pid.
start_sentinel() {
  local env=() flags=()
  while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then shift; flags=("$@"); break; fi
    env+=("$1"); shift
  done
  env "${env[@]}" timeout "$BENCH_MAX" "${SENTINEL_BIN:-bin/sentinel}" -config bench/sentinel.yaml "${flags[@]}" >"${sentinel_log:-$tmp/sentinel.log}" 2>&1 &
  sentinel_pid=$!; pids+=("$sentinel_pid")
  wait_for "http://$HOST:$ADMIN_PORT/readyz"
}

stop_sentinel() {
  kill "$sentinel_pid" 2>/dev/null || true
  wait "$sentinel_pid" 2>/dev/null || true
}
