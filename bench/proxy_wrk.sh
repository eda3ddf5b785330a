#!/usr/bin/env bash
# The reverse proxy against nginx: wrk on loopback through three proxies in front of the same
# fast upstream (nginx answering `return 200`), one after the other in the same run, each with
# one worker thread/process:
#   1. ratekeeper proxy, one rule on every request with Redis limits (all admitted),
#   2. ratekeeper proxy without rules,
#   3. nginx as reverse proxy with limit_req (its local zone, all admitted), keep-alive
#      connections to the upstream as ratekeeper keeps them (`keepalive 256`: the idle upstream
#      connections ratekeeper keeps by default; with fewer, nginx opens and closes upstream
#      connections once the client connections outnumber them).
# Prints req/s, p50/p99 latency, the proxy's CPU time per request (and of it the kernel's),
# redis-server's CPU time per request (INFO cpu, used_cpu_user + used_cpu_sys, over the
# measured run), and the ratios of (1) to (3).
#
#   bench/proxy_wrk.sh [path/to/ratekeeper]
#   WRK_THREADS=1 WRK_CONNECTIONS=32 WRK_DURATION=10s bench/proxy_wrk.sh
#   LIMITED_RULES='rules: [{name: all, limits: [...], lease: {max: 64, ttl: 1s}}]' bench/proxy_wrk.sh
# LIMITED_RULES replaces the rules of (1) (default: one token bucket that admits every request).
set -euo pipefail
cd "$(dirname "$0")/.."

binary=$(realpath "${1:-build/ratekeeper}")
wrk_threads=${WRK_THREADS:-1}
wrk_connections=${WRK_CONNECTIONS:-32}
wrk_duration=${WRK_DURATION:-10s}
limited_rules=${LIMITED_RULES:-"rules: [{name: all, limits: [{capacity: 1000000000, refill_rate: 1000000}]}]"}
nginx=${NGINX:-/usr/sbin/nginx}

[ -x "$binary" ] || { echo "no ratekeeper binary at $binary (build target ratekeeper_cli)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed (scripts/deps.sh)" >&2; exit 1; }
[ -x "$nginx" ] || { echo "nginx is not installed (scripts/deps.sh)" >&2; exit 1; }

. bench/proxy_lab.sh
start_redis
start_upstream

nginx_port=$(free_port 17500)
mkdir -p "$work/nginx"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 1;
error_log logs/error.log warn;
pid logs/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;
  upstream app { server 127.0.0.1:$upstream_port; keepalive 256; }
  server {
    listen 127.0.0.1:$nginx_port;
    keepalive_requests 1000000;
    location / {
      limit_req zone=perip burst=1000000 nodelay;
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
CONF
start_nginx "$work/nginx"
wait_port "$nginx_port"

proxy_config() {  # $1: file, $2: listen port, $3: admin port, $4: rules yaml
  cat >"$1" <<YAML
logging: {level: warn, decisions: {enabled: false}}
listen: 127.0.0.1:$2
threads: 1
store: {url: "redis://127.0.0.1:$redis_port"}
upstream: {url: "http://127.0.0.1:$upstream_port"}
admin: {listen: 127.0.0.1:$3}
$4
YAML
}

redis_cpu() {  # seconds of CPU redis-server has used
  redis-cli -p "$redis_port" info cpu 2>/dev/null |
    awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'
}

# wrk against port $1 (process $2 for CPU time); sets rps, p50, p99, cpu_us, sys_us, redis_us.
measure() {
  local port=$1 pid=$2 t0 t1 k0 k1 r0 r1 requests ticks
  wrk -t"$wrk_threads" -c"$wrk_connections" -d2s "http://127.0.0.1:$port/api/data" >/dev/null
  t0=$(cpu_ticks "$pid")
  k0=$(cpu_ticks "$pid" 15)
  r0=$(redis_cpu)
  wrk -t"$wrk_threads" -c"$wrk_connections" -d"$wrk_duration" --latency \
    "http://127.0.0.1:$port/api/data" >"$work/wrk.txt"
  t1=$(cpu_ticks "$pid")
  k1=$(cpu_ticks "$pid" 15)
  r1=$(redis_cpu)
  if grep -q "Non-2xx\|Socket errors" "$work/wrk.txt"; then
    echo "unexpected errors or non-2xx responses:" >&2
    cat "$work/wrk.txt" >&2
    exit 1
  fi
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.txt")
  p50=$(awk '$1 == "50%" {print $2}' "$work/wrk.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$work/wrk.txt")
  requests=$(awk '/requests in/ {print $1}' "$work/wrk.txt")
  ticks=$(getconf CLK_TCK)
  cpu_us=$(awk -v a="$t0" -v b="$t1" -v n="$requests" -v hz="$ticks" \
    'BEGIN {printf "%.1f", (b - a) / hz * 1e6 / n}')
  sys_us=$(awk -v a="$k0" -v b="$k1" -v n="$requests" -v hz="$ticks" \
    'BEGIN {printf "%.1f", (b - a) / hz * 1e6 / n}')
  redis_us=$(awk -v a="$r0" -v b="$r1" -v n="$requests" 'BEGIN {printf "%.1f", (b - a) * 1e6 / n}')
}
# CPU ticks of a process and its children (nginx: master + worker): user and kernel, or with
# $2 = 15 the kernel's alone (fields 14 and 15 of /proc/<pid>/stat).
cpu_ticks() {
  local total=0 p
  for p in $1 $(pgrep -P "$1" || true); do
    total=$((total + $(awk -v only="${2:-}" '{print only == "" ? $14 + $15 : $only}' "/proc/$p/stat")))
  done
  echo "$total"
}
to_ms() {  # wrk latency (e.g. 512.00us, 1.20ms) in ms
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0;
    else if (v ~ /s$/) n *= 1000; printf "%.3f", n }'
}

run_ratekeeper() {  # $1: config; sets rk_pid, rk_port
  rk_port=$(free_port 18000)
  local admin
  admin=$(free_port 18300)
  proxy_config "$work/rk.yaml" "$rk_port" "$admin" "$1"
  "$binary" serve --config "$work/rk.yaml" >"$work/ratekeeper.log" 2>&1 &
  rk_pid=$!
  pids+=("$rk_pid")
  wait_port "$rk_port"
}
stop_ratekeeper() {
  kill -TERM "$rk_pid"
  wait "$rk_pid" || true
}

row() { printf '%-40s %10s %10s %10s %12s %12s %14s\n' "$@"; }
echo "wrk -t$wrk_threads -c$wrk_connections -d$wrk_duration, one worker each, upstream nginx return 200, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
row "" "req/s" "p50" "p99" "CPU us/req" "of it kernel" "redis us/req"

run_ratekeeper "$limited_rules"
measure "$rk_port" "$rk_pid"
stop_ratekeeper
limited_rps=$rps limited_p99=$p99
row "ratekeeper proxy, Redis limits" "$rps" "$p50" "$p99" "$cpu_us" "$sys_us" "$redis_us"

run_ratekeeper "rules: []"
measure "$rk_port" "$rk_pid"
stop_ratekeeper
row "ratekeeper proxy, no rules" "$rps" "$p50" "$p99" "$cpu_us" "$sys_us" "$redis_us"

nginx_pid=$(cat "$work/nginx/logs/nginx.pid")
measure "$nginx_port" "$nginx_pid"
nginx_rps=$rps nginx_p99=$p99
row "nginx proxy + limit_req" "$rps" "$p50" "$p99" "$cpu_us" "$sys_us" "$redis_us"

awk -v a="$limited_rps" -v b="$nginx_rps" -v pa="$(to_ms "$limited_p99")" -v pb="$(to_ms "$nginx_p99")" 'BEGIN {
  printf "ratekeeper (Redis limits) / nginx+limit_req: throughput %.3f, p99 %.2f\n", a / b, pa / pb }'
