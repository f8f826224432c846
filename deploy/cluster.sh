#!/usr/bin/env bash
# make cluster [DURATION=2m]: the compose topology on this machine, without
# Docker: one redis-server, the demo backend, three gateways sharing the
# Redis (config.yaml's tenants and rules), and Prometheus scraping the three
# with the alert rules loaded. Everything listens on 127.0.0.1 and stops on
# Ctrl-C, or after DURATION (a sleep(1) duration: 90, 2m) when given.
#
# Ports (override from the environment): GATEWAY_PORTS="8081 8082 8083",
# ADMIN_PORTS="9091 9092 9093", BACKEND_PORT=9000, REDIS_PORT=6390,
# PROMETHEUS_PORT=9095. BIN=dir to build into (default bin). A port in use
# stops the script before it starts anything, naming the port and its holder.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-}
read -r -a gateway_ports <<<"${GATEWAY_PORTS:-8081 8082 8083}"
read -r -a admin_ports <<<"${ADMIN_PORTS:-9091 9092 9093}"
backend_port=${BACKEND_PORT:-9000}
redis_port=${REDIS_PORT:-6390}
prom_port=${PROMETHEUS_PORT:-9095}
bin=${BIN:-bin}

# holder PORT: what listens on the TCP port (any address, IPv4 or IPv6), as
# "pid N (command line)", from /proc: nothing to install, and it also finds
# a listener that a connect to 127.0.0.1 would miss (one on another address).
holder() {
  local hex inodes inode fd pid
  hex=$(printf '%04X' "$1")
  # /proc/net/tcp{,6}: local_address is ADDR:PORT in hex, st 0A is LISTEN.
  inodes=$(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p {print $10}' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
  [ -n "$inodes" ] || return 1
  for inode in $inodes; do
    for fd in /proc/[0-9]*/fd/*; do
      if [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$inode]" ]; then
        pid=${fd#/proc/}; pid=${pid%%/*}
        echo "pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | sed 's/ $//'))"
        return 0
      fi
    done
  done
  echo "a process this user cannot see (socket inode $inodes)"
}

# Every port is checked before anything starts: a process that finds its port
# taken would fail in its own log while the cluster proxied to whatever holds it.
busy=0
declare -A seen=()
check_port() { # port what
  if [ -n "${seen[$1]:-}" ]; then
    echo "cluster: port $1 is given to both ${seen[$1]} and $2" >&2
    busy=1
    return
  fi
  seen[$1]=$2
  local who
  if who=$(holder "$1"); then
    echo "cluster: port $1 ($2) is in use by $who" >&2
    busy=1
  fi
}
for i in 0 1 2; do
  check_port "${gateway_ports[$i]}" "gateway $((i + 1)), GATEWAY_PORTS"
  check_port "${admin_ports[$i]}" "gateway $((i + 1)) admin, ADMIN_PORTS"
done
check_port "$backend_port" "demo backend, BACKEND_PORT"
check_port "$redis_port" "redis-server, REDIS_PORT"
check_port "$prom_port" "Prometheus, PROMETHEUS_PORT"
if [ "$busy" != 0 ]; then
  echo "cluster: nothing started; free the ports or choose others (see the top of deploy/cluster.sh)" >&2
  exit 1
fi

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  echo "cluster: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

mkdir -p "$bin"
go build -o "$bin/sentinel" .
go build -o "$bin/demo-backend" ./loadtest/backend

work=$(mktemp -d "${TMPDIR:-/tmp}/sentinel-cluster.XXXXXX")
pids=()
keep=""  # set when something failed: the logs stay
stop() {
  trap - EXIT INT TERM
  echo "cluster: stopping"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -z "$keep" ]; then rm -rf "$work"; fi
}
trap stop EXIT
trap 'exit 130' INT TERM

wait_for() { # url what
  for _ in $(seq 100); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "cluster: $2 did not come up; logs in $work" >&2
  keep=1
  return 1
}

redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
  --daemonize no --logfile "$work/redis.log" &
pids+=($!)
"$bin/demo-backend" -listen "127.0.0.1:$backend_port" >"$work/backend.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

targets=""
for i in 0 1 2; do
  SENTINEL_SERVER_LISTEN="127.0.0.1:${gateway_ports[$i]}" \
  SENTINEL_SERVER_ADMIN_LISTEN="127.0.0.1:${admin_ports[$i]}" \
  SENTINEL_REDIS_ADDRS="127.0.0.1:$redis_port" \
  SENTINEL_UPSTREAMS_API_TARGETS="http://127.0.0.1:$backend_port" \
    "$bin/sentinel" -config config.yaml >"$work/sentinel-$((i + 1)).log" 2>&1 &
  pids+=($!)
  targets+="\"127.0.0.1:${admin_ports[$i]}\", "
done

cat >"$work/prometheus.yml" <<EOF
global: {scrape_interval: 2s, evaluation_interval: 2s}
rule_files: ["$PWD/alerts/rate_limiter_alerts.yml"]
scrape_configs:
  - job_name: sentinel
    static_configs:
      - targets: [${targets%, }]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prometheus" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)

for i in 0 1 2; do wait_for "http://127.0.0.1:${admin_ports[$i]}/readyz" "gateway $((i + 1))"; done
wait_for "http://127.0.0.1:$prom_port/-/ready" prometheus

cat <<EOF
cluster: up (logs in $work)
  gateways     http://127.0.0.1:${gateway_ports[0]}  http://127.0.0.1:${gateway_ports[1]}  http://127.0.0.1:${gateway_ports[2]}
               try: curl -si http://127.0.0.1:${gateway_ports[0]}/hello -H 'X-API-Key: demo-key-1'   (5 per 10 s across all three)
  admin API    http://127.0.0.1:${admin_ports[0]}/v1/state  (and :${admin_ports[1]}, :${admin_ports[2]}; /metrics, /readyz)
  Prometheus   http://127.0.0.1:$prom_port/targets  /rules  /alerts
  Redis        127.0.0.1:$redis_port     demo backend  http://127.0.0.1:$backend_port
EOF
if [ -n "$duration" ]; then
  echo "cluster: stopping in $duration (Ctrl-C stops now)"
  sleep "$duration" &
  pids+=($!)
  wait $!
else
  echo "cluster: Ctrl-C stops it"
  # Wake up when any process ends: a crashed gateway ends the cluster.
  wait -n || true
  keep=1
  echo "cluster: a process ended; logs in $work" >&2
  exit 1
fi
