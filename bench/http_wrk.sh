#!/usr/bin/env bash
# What the limiter costs over HTTP: wrk against GET /api/data on `ratekeeper serve`, once
# through the limiter (Redis store, capacity so large that every request is admitted) and
# once with limiting switched off (no rules), same threads, connections and duration, one
# after the other in the same run. Prints req/s and p50/p99 latency of both and the ratio.
#
#   bench/http_wrk.sh [path/to/ratekeeper]
#   WRK_THREADS=1 WRK_CONNECTIONS=32 WRK_DURATION=10s SERVER_THREADS=1 bench/http_wrk.sh
set -euo pipefail
cd "$(dirname "$0")/.."

binary=${1:-build/ratekeeper}
wrk_threads=${WRK_THREADS:-1}
wrk_connections=${WRK_CONNECTIONS:-32}
wrk_duration=${WRK_DURATION:-10s}
server_threads=${SERVER_THREADS:-1}
store_url=${STORE_URL:-}

[ -x "$binary" ] || { echo "no ratekeeper binary at $binary (build target ratekeeper_cli)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed (scripts/deps.sh)" >&2; exit 1; }

work=$(mktemp -d)
redis_pid=""
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [ -n "$redis_pid" ] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p
  for p in $(seq "$1" $(($1 + 200))); do
    if ! port_in_use "$p"; then echo "$p"; return; fi
  done
  return 1
}

if [ -z "$store_url" ]; then
  redis_port=$(free_port 17000)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$work" --logfile "$work/redis.log" &
  redis_pid=$!
  for _ in $(seq 1 100); do
    [ "$(redis-cli -p "$redis_port" ping 2>/dev/null || true)" = "PONG" ] && break
    sleep 0.1
  done
  store_url=redis://127.0.0.1:$redis_port
fi

cat >"$work/limited.yaml" <<YAML
logging: {level: warn}
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 1000000000
        refill_rate: 1000000
YAML
printf 'logging: {level: warn}\nrules: []\n' >"$work/unlimited.yaml"

# Runs wrk against a fresh server with configuration $1; sets rps, p50, p99, codes.
measure() {
  local config=$1 port
  port=$(free_port 18000)
  "$binary" serve --config "$config" --store "$store_url" --listen "127.0.0.1:$port" \
    --threads "$server_threads" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break
    sleep 0.1
  done
  # Warm up connections, scripts and caches, then measure.
  wrk -t"$wrk_threads" -c"$wrk_connections" -d2s "http://127.0.0.1:$port/api/data" >/dev/null
  wrk -t"$wrk_threads" -c"$wrk_connections" -d"$wrk_duration" --latency \
    "http://127.0.0.1:$port/api/data" >"$work/wrk.txt"
  codes=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/data")
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=""
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.txt")
  p50=$(awk '$1 == "50%" {print $2}' "$work/wrk.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$work/wrk.txt")
  if grep -q "Non-2xx" "$work/wrk.txt"; then
    echo "unexpected non-2xx responses:" >&2
    cat "$work/wrk.txt" >&2
    exit 1
  fi
}

echo "wrk -t$wrk_threads -c$wrk_connections -d$wrk_duration, server --threads $server_threads, store $store_url, $(nproc) cores"
measure "$work/limited.yaml"
limited_rps=$rps limited_p50=$p50 limited_p99=$p99 limited_code=$codes
measure "$work/unlimited.yaml"
plain_rps=$rps plain_p50=$p50 plain_p99=$p99

printf '%-26s %12s %10s %10s\n' "" "req/s" "p50" "p99"
printf '%-26s %12s %10s %10s\n' "limited (redis, 1 rule)" "$limited_rps" "$limited_p50" "$limited_p99"
printf '%-26s %12s %10s %10s\n' "unlimited (no rules)" "$plain_rps" "$plain_p50" "$plain_p99"
awk -v a="$limited_rps" -v b="$plain_rps" 'BEGIN {
  printf "limited / unlimited throughput: %.3f (limiter cost %.1f%%)\n", a / b, (1 - a / b) * 100 }'
[ "$limited_code" = 200 ] || echo "warning: the limited server answered $limited_code after the run" >&2
