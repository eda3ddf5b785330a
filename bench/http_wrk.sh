#!/usr/bin/env bash
# What the limiter costs over HTTP: wrk against GET /api/data on `ratekeeper serve`, once
# through the limiter (Redis store, capacity so large that every request is admitted) and
# once with limiting switched off (no rules), same threads, connections and duration, one
# after the other in the same run. Prints req/s and p50/p99 latency of both and the ratio,
# and the CPU time per request of the server and of redis-server (what the limiter costs
# on a machine where wrk, the server and Redis share the cores). A third run, limited on
# memory://, separates the limiter's own cost from the Redis round trip (SKIP_MEMORY=1: skip).
# Two more runs (SKIP_EXTRA=1: skip) show the other shapes of traffic: every request from
# its own user (X-User-ID drawn at random from 100,000: checks of different keys, nothing
# for Redis to fold together), and every request denied (capacity 1: the denial cache
# answers without Redis). A last run (SKIP_SEED=1: skip) is the seed's FastAPI application
# with the seed's own limiter on the same Redis (bench/seed_fastapi.py under uvicorn, Debian's
# /usr/bin/python3, one process), same wrk load, every request admitted.
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
python=/usr/bin/python3
if [ -z "${SKIP_SEED:-}" ] && ! "$python" -c 'import fastapi, uvicorn, redis' 2>/dev/null; then
  echo "the seed's app needs $python with fastapi, uvicorn and redis (scripts/deps.sh), or SKIP_SEED=1" >&2
  exit 1
fi

work=$(mktemp -d)
redis_pid=""
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [ -n "$redis_pid" ] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

. bench/ports.sh

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
demo_api: true
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 1000000000
        refill_rate: 1000000
YAML
printf 'logging: {level: warn}\ndemo_api: true\nrules: []\n' >"$work/unlimited.yaml"
cat >"$work/users.yaml" <<YAML
logging: {level: warn}
demo_api: true
rules:
  - name: api
    match: {path: /api/data}
    identity: {type: header, header: X-User-ID, default: anonymous}
    limits:
      - capacity: 1000000000
        refill_rate: 1000000
YAML
cat >"$work/denied.yaml" <<YAML
logging: {level: warn}
demo_api: true
rules:
  - name: api
    match: {path: /api/data}
    limits:
      - capacity: 1
        refill_rate: 0.001
YAML
cat >"$work/users.lua" <<'LUA'
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/api/data", {["X-User-ID"] = "u" .. math.random(100000)})
end
LUA

redis_cpu() {
  redis-cli -u "$store_url" info cpu 2>/dev/null |
    awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'
}

# Runs wrk against a fresh server with configuration $1 (`seed`: the seed's FastAPI app) and
# store $2; sets rps, p50, p99, server_us and redis_us (CPU time per request of the server
# process and of redis-server).
measure() {
  local config=$1 store=$2 expect=${3:-2xx} script=${4:-} port r0 r1 ticks requests ready=/healthz
  local -a wrk_script=()
  [ -n "$script" ] && wrk_script=(-s "$script")
  port=$(free_port 18000)
  if [ "$config" = seed ]; then
    ready=/_recipe/hits
    SEED_REDIS_URL=$store SEED_CAPACITY=1000000000 SEED_REFILL_RATE=1000000 \
      "$python" -m uvicorn --app-dir bench seed_fastapi:app --host 127.0.0.1 --port "$port" \
      --log-level warning >"$work/server.log" 2>&1 &
  else
    "$binary" serve --config "$config" --store "$store" --listen "127.0.0.1:$port" \
      --threads "$server_threads" >"$work/server.log" 2>&1 &
  fi
  server_pid=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port$ready" && break
    sleep 0.1
  done
  # Warm up connections, scripts and caches, then measure.
  wrk -t"$wrk_threads" -c"$wrk_connections" -d2s "http://127.0.0.1:$port/api/data" >/dev/null
  local t0 t1
  t0=$(awk '{print $14 + $15}' "/proc/$server_pid/stat")
  r0=$(redis_cpu)
  wrk -t"$wrk_threads" -c"$wrk_connections" -d"$wrk_duration" --latency "${wrk_script[@]}" \
    "http://127.0.0.1:$port/api/data" >"$work/wrk.txt"
  r1=$(redis_cpu)
  t1=$(awk '{print $14 + $15}' "/proc/$server_pid/stat")
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=""
  if [ "$expect" = 2xx ] && grep -q "Non-2xx" "$work/wrk.txt"; then
    echo "unexpected non-2xx responses:" >&2
    cat "$work/wrk.txt" >&2
    exit 1
  fi
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.txt")
  p50=$(awk '$1 == "50%" {print $2}' "$work/wrk.txt")
  p99=$(awk '$1 == "99%" {print $2}' "$work/wrk.txt")
  requests=$(awk '/requests in/ {print $1}' "$work/wrk.txt")
  ticks=$(getconf CLK_TCK)
  server_us=$(awk -v a="$t0" -v b="$t1" -v n="$requests" -v hz="$ticks" \
    'BEGIN {printf "%.1f", (b - a) / hz * 1e6 / n}')
  redis_us=$(awk -v a="$r0" -v b="$r1" -v n="$requests" 'BEGIN {printf "%.1f", (b - a) * 1e6 / n}')
}

row() { printf '%-30s %10s %10s %10s %14s %13s\n' "$@"; }

echo "wrk -t$wrk_threads -c$wrk_connections -d$wrk_duration, server --threads $server_threads, store $store_url, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
row "" "req/s" "p50" "p99" "server us/req" "redis us/req"
measure "$work/limited.yaml" "$store_url"
limited_rps=$rps
limited_us=$server_us
row "limited (redis, 1 rule)" "$rps" "$p50" "$p99" "$server_us" "$redis_us"
measure "$work/unlimited.yaml" "$store_url"
plain_rps=$rps
plain_us=$server_us
row "unlimited (no rules)" "$rps" "$p50" "$p99" "$server_us" "$redis_us"
if [ -z "${SKIP_MEMORY:-}" ]; then
  measure "$work/limited.yaml" "memory://"
  memory_us=$server_us
  row "limited (memory://, 1 rule)" "$rps" "$p50" "$p99" "$server_us" "-"
fi
if [ -z "${SKIP_EXTRA:-}" ]; then
  measure "$work/users.yaml" "$store_url" 2xx "$work/users.lua"
  users_rps=$rps
  row "limited (redis, 100k users)" "$rps" "$p50" "$p99" "$server_us" "$redis_us"
  measure "$work/unlimited.yaml" "$store_url" 2xx "$work/users.lua"
  users_plain_rps=$rps
  row "unlimited (100k users)" "$rps" "$p50" "$p99" "$server_us" "$redis_us"
  measure "$work/denied.yaml" "$store_url" any
  if ! grep -q "Non-2xx" "$work/wrk.txt"; then
    echo "expected 429s in the denied run" >&2
    exit 1
  fi
  row "denied (redis, all 429)" "$rps" "$p50" "$p99" "$server_us" "$redis_us"
fi
if [ -z "${SKIP_SEED:-}" ]; then
  measure seed "$store_url"
  seed_rps=$rps
  row "seed FastAPI app (redis)" "$rps" "$p50" "$p99" "$server_us" "$redis_us"
fi
awk -v a="$limited_rps" -v b="$plain_rps" 'BEGIN {
  printf "limited (redis) / unlimited throughput: %.3f (limiter cost %.1f%%)\n", a / b, (1 - a / b) * 100 }'
awk -v a="$limited_us" -v b="$plain_us" 'BEGIN {
  printf "limited (redis) / unlimited server CPU per request: %.3f\n", a / b }'
if [ -z "${SKIP_MEMORY:-}" ]; then
  awk -v a="$memory_us" -v b="$plain_us" 'BEGIN {
    printf "limited (memory://) / unlimited server CPU per request: %.3f\n", a / b }'
fi
if [ -z "${SKIP_EXTRA:-}" ]; then
  awk -v a="$users_rps" -v b="$users_plain_rps" 'BEGIN {
    printf "100k users: limited (redis) / unlimited throughput: %.3f (limiter cost %.1f%%)\n", a / b, (1 - a / b) * 100 }'
fi
if [ -z "${SKIP_SEED:-}" ]; then
  awk -v a="$limited_rps" -v b="$seed_rps" 'BEGIN {
    printf "limited (redis) / seed FastAPI app throughput: %.1fx\n", a / b }'
fi
