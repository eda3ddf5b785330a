#!/usr/bin/env bash
# Envoy's rate limit service next to the decision API, one load generator for both: h2load
# (Debian's nghttp2-client) sends ShouldRateLimit over HTTP/2 (gRPC framing, one descriptor)
# and POST /v1/check over HTTP/1.1 (the same check as JSON), to one `ratekeeper serve` with
# one io thread and one gRPC thread, on the same Redis, same limit (a token bucket so large that
# every request is admitted), same number of requests in flight, one after the other in the
# same run, each ROUNDS times alternating. Prints per run requests/s and p50/p99 latency
# (from h2load's per-request log), the server's CPU time per decision, redis-server's (INFO cpu
# over the decisions) and the decisions per script call (INFO commandstats), the medians, and
# the ratio gRPC / HTTP/1.1.
#
#   bench/rls_h2load.sh [path/to/ratekeeper]
#   REQUESTS=200000 IN_FLIGHT=64 GRPC_CONNECTIONS=4 ROUNDS=3 bench/rls_h2load.sh
set -euo pipefail
cd "$(dirname "$0")/.."

binary=${1:-build/ratekeeper}
requests=${REQUESTS:-100000}
in_flight=${IN_FLIGHT:-64}
grpc_connections=${GRPC_CONNECTIONS:-4}
rounds=${ROUNDS:-3}

[ -x "$binary" ] || { echo "no ratekeeper binary at $binary (build target ratekeeper_cli)" >&2; exit 1; }
command -v h2load >/dev/null || { echo "h2load is not installed (nghttp2-client, scripts/deps.sh)" >&2; exit 1; }

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

redis_port=$(free_port 17100)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --daemonize no --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
for _ in $(seq 1 100); do
  [ "$(redis-cli -p "$redis_port" ping 2>/dev/null || true)" = "PONG" ] && break
  sleep 0.1
done

http_port=$(free_port 18100)
grpc_port=$(free_port $((http_port + 1)))
mkdir "$work/domains"
cat >"$work/domains/bench.yaml" <<YAML
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
YAML
cat >"$work/ratekeeper.yaml" <<YAML
listen: 127.0.0.1:$http_port
threads: 1
store: {url: "redis://127.0.0.1:$redis_port"}
logging: {level: warn, decisions: {enabled: false}}
rules:
  - name: bench
    match: {path: /never}
    limits: [{algorithm: token_bucket, capacity: 1000000, refill_rate: 1000000}]
grpc:
  listen: 127.0.0.1:$grpc_port
  config: $work/domains
  threads: 1
YAML
"$binary" serve --config "$work/ratekeeper.yaml" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  port_in_use "$grpc_port" && port_in_use "$http_port" && break
  sleep 0.1
done

# The gRPC message: a 5-byte frame header (not compressed, big-endian length), then the
# RateLimitRequest {domain: "bench", descriptors: [{entries: [{key: "user", value: "42"}]}]}.
python3 - "$work/grpc.bin" <<'PY'
import struct, sys
def field(number, payload):
    return bytes([number << 3 | 2, len(payload)]) + payload
entry = field(1, b"user") + field(2, b"42")
message = field(1, b"bench") + field(2, field(1, entry))
open(sys.argv[1], "wb").write(b"\0" + struct.pack(">I", len(message)) + message)
PY
printf '{"rule":"bench","identity":"user:42"}' >"$work/check.json"

server_cpu() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
redis_cpu() { redis-cli -p "$redis_port" info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }
# Script calls Redis ran (FCALL, EVALSHA, EVAL): decisions per call say how well checks batch.
script_calls() {
  redis-cli -p "$redis_port" info commandstats |
    awk -F'[:=,]' '/^cmdstat_(fcall|evalsha|eval):/ {s += $3} END {print s + 0}'
}
hz=$(getconf CLK_TCK)

# One run: requests/s, p50 and p99 (ms), server and Redis CPU µs per request, decisions per
# script call.
run() {
  local kind=$1 log=$work/$1.log
  local s0 r0 s1 r1 c0 c1 out
  s0=$(server_cpu)
  r0=$(redis_cpu)
  c0=$(script_calls)
  if [ "$kind" = grpc ]; then
    out=$(h2load -n "$requests" -c "$grpc_connections" -m $((in_flight / grpc_connections)) \
      --data="$work/grpc.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
      --log-file="$log" "http://127.0.0.1:$grpc_port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
  else
    out=$(h2load --h1 -n "$requests" -c "$in_flight" -m 1 --data="$work/check.json" \
      -H 'content-type: application/json' --log-file="$log" "http://127.0.0.1:$http_port/v1/check")
  fi
  s1=$(server_cpu)
  r1=$(redis_cpu)
  c1=$(script_calls)
  local ok rps
  ok=$(echo "$out" | awk '/^status codes:/ {print $3}')
  rps=$(echo "$out" | awk '/^finished in/ {gsub(",", "", $4); print $4}')
  if [ "$ok" != "$requests" ]; then
    echo "$kind: $ok of $requests answered 2xx" >&2
    echo "$out" >&2
    exit 1
  fi
  # h2load's log: start time, status, elapsed µs per request.
  sort -n -k3 "$log" | awk -v n="$(wc -l <"$log")" -v rps="$rps" -v s="$((s1 - s0))" -v hz="$hz" \
    -v r="$(echo "$r1 - $r0" | bc -l)" -v req="$requests" -v calls="$((c1 - c0))" '
    NR == int(n * 0.50) + 1 {p50 = $3}
    NR == int(n * 0.99) + 1 {p99 = $3}
    END {printf "%.0f %.3f %.3f %.2f %.2f %.1f\n", rps, p50 / 1000, p99 / 1000, s / hz * 1e6 / req, r * 1e6 / req,
         req / (calls > 0 ? calls : 1)}'
}

# Warm-up: connections, the library of functions in Redis, the first keys.
REQUESTS_SAVED=$requests
requests=5000
run grpc >/dev/null
run http >/dev/null
requests=$REQUESTS_SAVED

echo "requests per run: $requests, in flight: $in_flight (gRPC: $grpc_connections connections × $((in_flight / grpc_connections)) streams; HTTP/1.1: $in_flight connections)"
printf '%-10s %5s %10s %9s %9s %14s %14s %15s\n' path round req/s p50_ms p99_ms server_us/req redis_us/req decisions/call
: >"$work/results"
for round in $(seq 1 "$rounds"); do
  for kind in grpc http; do
    line=$(run "$kind")
    echo "$kind $line" >>"$work/results"
    # shellcheck disable=SC2086
    printf '%-10s %5s %10s %9s %9s %14s %14s %15s\n' "$kind" "$round" $line
  done
done

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
echo
printf '%-10s %10s %9s %9s %14s %14s %15s\n' median req/s p50_ms p99_ms server_us/req redis_us/req decisions/call
for kind in grpc http; do
  cols=()
  for c in 2 3 4 5 6 7; do cols+=("$(awk -v k="$kind" -v c="$c" '$1 == k {print $c}' "$work/results" | median)"); done
  printf '%-10s %10s %9s %9s %14s %14s %15s\n' "$kind" "${cols[@]}"
done
g=$(awk '$1 == "grpc" {print $2}' "$work/results" | median)
h=$(awk '$1 == "http" {print $2}' "$work/results" | median)
echo
echo "throughput gRPC / HTTP/1.1 (medians): $(echo "scale=3; $g / $h" | bc -l)"
