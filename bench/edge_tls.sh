#!/usr/bin/env bash
# TLS termination and HTTP/2 against nginx: the same certificate (EC P-256), the same fast
# upstream (nginx answering `return 200`), one worker each, one after the other in the same run:
#   1. ratekeeper proxy with `tls`, one rule on every request with Redis limits (all admitted),
#   2. nginx with `ssl http2`, limit_req (its local zone, all admitted), keep-alive upstream
#      (`keepalive 256`: the idle upstream connections ratekeeper keeps by default).
# Each is measured with wrk over HTTPS (HTTP/1.1, keep-alive: the handshakes are not what is
# measured) and with h2load over h2 (10 streams per connection). Prints req/s, p50/p99 (wrk),
# the proxy's CPU time per request and the ratios of (1) to (2).
#
#   bench/edge_tls.sh [path/to/ratekeeper]
#   CONNECTIONS=32 DURATION=10 bench/edge_tls.sh
set -euo pipefail
cd "$(dirname "$0")/.."

binary=$(realpath "${1:-build/ratekeeper}")
connections=${CONNECTIONS:-32}
duration=${DURATION:-10}
nginx=${NGINX:-/usr/sbin/nginx}
for tool in wrk h2load openssl redis-server; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (scripts/deps.sh)" >&2; exit 1; }
done

. bench/proxy_lab.sh

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null

start_redis
start_upstream

nginx_port=$(free_port 17500)
mkdir -p "$work/nginx"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 1; error_log logs/error.log warn; pid logs/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;
  upstream app { server 127.0.0.1:$upstream_port; keepalive 256; }
  server {
    listen 127.0.0.1:$nginx_port ssl http2;
    ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    keepalive_requests 1000000;
    location / {
      limit_req zone=perip burst=1000000 nodelay;
      proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
CONF
start_nginx "$work/nginx"
wait_port "$nginx_port"

rk_port=$(free_port 18000)
cat >"$work/rk.yaml" <<YAML
logging: {level: warn, decisions: {enabled: false}}
listen: 127.0.0.1:$rk_port
threads: 1
tls: {cert_file: $work/cert.pem, key_file: $work/key.pem}
store: {url: "redis://127.0.0.1:$redis_port"}
upstream: {url: "http://127.0.0.1:$upstream_port"}
admin: {listen: 127.0.0.1:$(free_port 18300)}
rules: [{name: all, limits: [{capacity: 1000000000, refill_rate: 1000000}]}]
YAML
"$binary" serve --config "$work/rk.yaml" >"$work/ratekeeper.log" 2>&1 &
rk_pid=$!
pids+=("$rk_pid")
wait_port "$rk_port"
nginx_pid=$(cat "$work/nginx/logs/nginx.pid")

cpu_ticks() {  # a process and its children (nginx: master + worker)
  local total=0 p
  for p in $1 $(pgrep -P "$1" || true); do total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$total"
}
per_request_us() {  # ticks before, after, requests
  awk -v a="$1" -v b="$2" -v n="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", (b - a) / hz * 1e6 / n}'
}
# wrk over HTTPS against port $1 (pid $2): sets rps, p50, p99, cpu
measure_wrk() {
  wrk -t1 -c"$connections" -d2s "https://127.0.0.1:$1/api/data" >/dev/null
  local t0 t1
  t0=$(cpu_ticks "$2")
  wrk -t1 -c"$connections" -d"${duration}s" --latency "https://127.0.0.1:$1/api/data" >"$work/wrk.txt"
  t1=$(cpu_ticks "$2")
  if grep -q "Non-2xx\|Socket errors" "$work/wrk.txt"; then cat "$work/wrk.txt" >&2; exit 1; fi
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.txt")
  p50=$(awk '$1 == "50%" {print $2}' "$work/wrk.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$work/wrk.txt")
  cpu=$(per_request_us "$t0" "$t1" "$(awk '/requests in/ {print $1}' "$work/wrk.txt")")
}
# h2load over h2 (TLS, ALPN) against port $1 (pid $2): sets rps, cpu
measure_h2() {
  h2load -t1 -c"$connections" -m10 -D2 "https://127.0.0.1:$1/api/data" >/dev/null
  local t0 t1
  t0=$(cpu_ticks "$2")
  h2load -t1 -c"$connections" -m10 -D"$duration" "https://127.0.0.1:$1/api/data" >"$work/h2.txt"
  t1=$(cpu_ticks "$2")
  grep -qi "application protocol: h2" "$work/h2.txt" || { cat "$work/h2.txt" >&2; exit 1; }
  local ok
  ok=$(awk '/^status codes:/ {print $3}' "$work/h2.txt")
  rps=$(awk '/^finished in/ {gsub(",", "", $4); print $4}' "$work/h2.txt")
  cpu=$(per_request_us "$t0" "$t1" "$ok")
}

row() { printf '%-34s %10s %10s %10s %12s\n' "$@"; }
echo "TLS (EC P-256) termination, $connections connections, ${duration}s, one worker each, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
row "" "req/s" "p50" "p99" "CPU us/req"
measure_wrk "$rk_port" "$rk_pid"; rk_h1=$rps; row "ratekeeper, HTTPS (wrk)" "$rps" "$p50" "$p99" "$cpu"
measure_wrk "$nginx_port" "$nginx_pid"; ng_h1=$rps; row "nginx, HTTPS (wrk)" "$rps" "$p50" "$p99" "$cpu"
measure_h2 "$rk_port" "$rk_pid"; rk_h2=$rps; row "ratekeeper, h2 x10 streams (h2load)" "$rps" "" "" "$cpu"
measure_h2 "$nginx_port" "$nginx_pid"; ng_h2=$rps; row "nginx, h2 x10 streams (h2load)" "$rps" "" "" "$cpu"
awk -v a="$rk_h1" -v b="$ng_h1" -v c="$rk_h2" -v d="$ng_h2" 'BEGIN {
  printf "ratekeeper / nginx: HTTPS throughput %.3f, h2 throughput %.3f\n", a / b, c / d }'
