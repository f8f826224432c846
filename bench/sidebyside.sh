#!/usr/bin/env bash
# make bench-sidebyside: a change to Sentinel measured against its floor and
# against the revision before it, the three serving at the same time.
#
# make bench-compare starts a fresh gateway for each run and runs each row
# for seconds, one after the other: on a machine whose speed drifts within a
# minute (a shared VM), a row and its reference are minutes apart and the
# rounds' ratios spread by ±20%. Here the bare fasthttp proxy (the floor),
# Sentinel at BASE (default HEAD) and Sentinel of the working tree run side
# by side for the whole benchmark, each on its own port, and wrk visits them
# in turn for DURATION seconds each (default 2), ROUNDS times (default 14):
# the ratio of a round compares runs seconds apart. It prints each round and
# the medians of the ratios: requests per second against the floor, gateway
# CPU per request (user + system, /proc) against the floor's, and the working
# tree against BASE.
#
# ROW=proxy (default): bench/sentinel.yaml's proxy row (memory store,
# adaptive on, limits decided and not reached), the 64-byte answer.
# ROW=refuse: the refusal row (the tenant limited to 99/s, nearly every
# request refused) against a bare fasthttp server that answers 429 itself.
# REF=headers: in place of Sentinel at BASE, the bare proxy (or 429 server)
# that adds the headers Sentinel adds by default, as constants
# (bareproxy -headers): the floor of a gateway that writes them. The
# working tree against it is what Sentinel's decisions cost beyond them.
# NEW_ENV="SENTINEL_KEY=value ...": settings of the working tree's gateway
# only (BASE=HEAD and NEW_ENV: what a setting costs or saves).
# Everything listens on 127.0.0.1 and stops by itself. About 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-14}
DURATION=${DURATION:-2}
ROW=${ROW:-proxy}
BASE=${BASE:-HEAD}
REF=${REF:-base}
ref_desc="Sentinel at $BASE"
[ "$REF" = headers ] && ref_desc="the bare proxy with Sentinel's headers (as base)"
export BENCH_DIR=bench
source bench/lib.sh

need wrk wrk
mkdir -p bin
go build -o bin/sentinel .
case $REF in
  base)
    base_src=$(mktemp -d)
    git archive --format=tar "$BASE" | tar -x -C "$base_src"
    (cd "$base_src" && go build -o "$OLDPWD/bin/sentinel-base" .)
    rm -rf "$base_src" ;;
  headers) ;;
  *) echo "bench-sidebyside: REF is base or headers, not $REF" >&2; exit 2 ;;
esac
go build -o bin/demo-backend ./loadtest/backend
go build -o bin/bareproxy ./bench/bareproxy

envs=()
case $ROW in
  proxy) bare_args=(-upstream "$HOST:$BACKEND_PORT") ;;
  refuse)
    bare_args=(-refuse)
    envs=(SENTINEL_LIMITS_TENANT=99 SENTINEL_LIMITS_API_KEY=0 SENTINEL_LIMITS_IP=0) ;;
  *) echo "bench-sidebyside: ROW is proxy or refuse, not $ROW" >&2; exit 2 ;;
esac
timeout "$BENCH_MAX" bin/bareproxy "${bare_args[@]}" -listen "$HOST:$BARE_PORT" >"$tmp/bare.log" 2>&1 &
bare_pid=$!; pids+=("$bare_pid")
start_backend

# serve NAME BIN PORT ADMIN_PORT [VAR=value...]: a gateway on its own
# ports; sets gw_pid.
serve() {
  sed -e "s/127.0.0.1:$SENTINEL_PORT/127.0.0.1:$3/" -e "s/127.0.0.1:$ADMIN_PORT/127.0.0.1:$4/" bench/sentinel.yaml >"$tmp/$1.yaml"
  env "${envs[@]}" "${@:5}" timeout "$BENCH_MAX" "$2" -config "$tmp/$1.yaml" >"$tmp/$1.log" 2>&1 &
  gw_pid=$!; pids+=("$gw_pid")
  wait_for "http://$HOST:$4/readyz"
}
if [ "$REF" = headers ]; then
  timeout "$BENCH_MAX" bin/bareproxy "${bare_args[@]}" -headers -listen "$HOST:$((SENTINEL_PORT + 1))" >"$tmp/base.log" 2>&1 &
  base_pid=$!; pids+=("$base_pid")
else
  serve base bin/sentinel-base $((SENTINEL_PORT + 1)) $((ADMIN_PORT + 1)); base_pid=$gw_pid
fi
read -ra new_env <<<"${NEW_ENV:-}"
serve new bin/sentinel $((SENTINEL_PORT + 2)) $((ADMIN_PORT + 2)) "${new_env[@]}"; new_pid=$gw_pid
for _ in $(seq 100); do curl -s -o /dev/null "http://$HOST:$BARE_PORT/" && break; sleep 0.1; done

names=(bare base new)
declare -A url=([bare]="http://$HOST:$BARE_PORT/" [base]="http://$HOST:$((SENTINEL_PORT + 1))/" [new]="http://$HOST:$((SENTINEL_PORT + 2))/")
declare -A pid=([bare]=$bare_pid [base]=$base_pid [new]=$new_pid)
for n in "${names[@]}"; do wrk -t2 -c64 -d1s -s bench/proxy.lua "${url[$n]}" >/dev/null; done # warm-up

echo "bench-sidebyside: ROW=$ROW, $ROUNDS rounds of ${DURATION}s on each of: the bare proxy, $ref_desc, the working tree ($(git describe --tags --always --dirty))${NEW_ENV:+ with $NEW_ENV}" >&2
results=$tmp/rounds
for round in $(seq "$ROUNDS"); do
  line=$round
  for n in "${names[@]}"; do
    t0=$(ticks "${pid[$n]}")
    out=$(wrk -t2 -c64 -d"${DURATION}s" -s bench/proxy.lua "${url[$n]}" | grep '^BENCH ')
    t1=$(ticks "${pid[$n]}")
    reqs=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$out")
    us=$(sed -E 's/.*duration_us=([0-9]+).*/\1/' <<<"$out")
    line="$line $((reqs * 1000000 / us)) $(awk -v t=$((t1 - t0)) -v r="$reqs" -v c="$CLK_TCK" 'BEGIN {printf "%.2f", t * 1e6 / c / r}')"
  done
  echo "$line" | tee -a "$results" | awk '{printf "  round %2d  bare %6d req/s %5.1f µs  base %6d req/s %5.1f µs  new %6d req/s %5.1f µs\n", $1, $2, $3, $4, $5, $6, $7}' >&2
done

# Medians over the rounds of each round's ratios.
awk '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { n++; rb[n] = $4 / $2; rn[n] = $6 / $2; rnb[n] = $6 / $4; cb[n] = $5 / $3; cn[n] = $7 / $3; cnb[n] = $7 / $5 }
  END {
    printf "req/s vs the bare proxy:  base %.3f×  new %.3f×   new vs base %.3f×\n", median(rb, n), median(rn, n), median(rnb, n)
    printf "gateway CPU per request vs the bare proxy'\''s:  base %.3f×  new %.3f×   new vs base %.3f×\n", median(cb, n), median(cn, n), median(cnb, n)
  }' "$results"
