#!/usr/bin/env bash
# `ratekeeper bench` over TLS (rediss://) next to plain TCP (redis://) against one redis-server
# serving both ports, in one run, rounds alternating; prints the medians of decisions/s,
# p50/p99 latency and Redis CPU per decision (INFO cpu over the decisions), and the ratios.
# Certificates: a CA and a server certificate for 127.0.0.1 made with openssl for the run.
# Builds nothing: the binary comes from $RATEKEEPER (default ./build/ratekeeper).
#
#   bench/redis_tls.sh [--requests N] [--concurrency C] [--keys K] [--repeat R]
set -euo pipefail

requests=200000
concurrency=64
keys=1000
repeat=5
ratekeeper=${RATEKEEPER:-./build/ratekeeper}

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
need_value() { [[ $# -ge 2 && -n $2 ]] || { echo "redis_tls.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --requests) need_value "$@"; requests=$2; shift 2 ;;
    --concurrency) need_value "$@"; concurrency=$2; shift 2 ;;
    --keys) need_value "$@"; keys=$2; shift 2 ;;
    --repeat) need_value "$@"; repeat=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "redis_tls.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for v in requests concurrency keys repeat; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "redis_tls.sh: --$v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
[[ -x $ratekeeper ]] || { echo "redis_tls.sh: no executable at '$ratekeeper' (set RATEKEEPER)" >&2; exit 2; }
for tool in redis-server redis-cli openssl python3; do
  command -v "$tool" >/dev/null || { echo "redis_tls.sh: $tool not found" >&2; exit 2; }
done
source "$(dirname "$0")/ports.sh"

dir=$(mktemp -d)
port=$(free_port 24100)
tls_port=$(free_port $((port + 1)))
cleanup() {
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ec "$dir/ca.key"
openssl req -x509 -new -key "$dir/ca.key" -out "$dir/ca.crt" -days 2 -subj "/CN=bench CA" 2>/dev/null
ec "$dir/server.key"
openssl req -new -key "$dir/server.key" -out "$dir/server.csr" -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$dir/ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -out "$dir/server.crt" -days 2 -extfile "$dir/ext" 2>/dev/null

redis-server --port "$port" --tls-port "$tls_port" --tls-cert-file "$dir/server.crt" \
  --tls-key-file "$dir/server.key" --tls-ca-cert-file "$dir/ca.crt" --tls-auth-clients no \
  --save "" --appendonly no --daemonize yes --logfile "$dir/redis.log" --dir "$dir"
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

cpu() { redis-cli -p "$port" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }

declare -A urls=(
  [plain]="redis://127.0.0.1:$port"
  [tls]="rediss://127.0.0.1:$tls_port?ca_file=$dir/ca.crt"
)
results="$dir/results"
for round in $(seq "$repeat"); do
  for row in plain tls; do
    redis-cli -p "$port" flushall >/dev/null
    before=$(cpu)
    json=$("$ratekeeper" bench --store "${urls[$row]}" --requests "$requests" --concurrency "$concurrency" \
      --keys "$keys" --capacity 1000000 --rate 1000000 --json)
    after=$(cpu)
    echo "$row $before $after $json" >>"$results"
  done
done

python3 - "$results" "$requests" "$concurrency" "$keys" "$repeat" <<'PY'
import json, statistics, sys
path, requests, concurrency, keys, repeat = sys.argv[1:]
rows = {}
for line in open(path):
    row, before, after, text = line.split(" ", 3)
    r = json.loads(text)
    if r["errors"]:
        sys.exit(f"redis_tls.sh: {row}: {r['errors']} errors {r['error_codes']}")
    decisions = r["allowed"] + r["denied"]
    rows.setdefault(row, []).append((r["decisions_per_s"], r["latency_us"]["p50"], r["latency_us"]["p99"],
                                     (float(after) - float(before)) * 1e6 / decisions))
print(f"ratekeeper bench: {requests} decisions, concurrency {concurrency}, {keys} keys, token bucket; "
      f"medians of {repeat} alternating rounds")
print(f"{'store':<8}{'decisions/s':>14}{'p50 us':>10}{'p99 us':>10}{'redis CPU us/decision':>24}")
med = {}
for row in ("plain", "tls"):
    cols = list(zip(*rows[row]))
    med[row] = [statistics.median(c) for c in cols]
    d, p50, p99, c = med[row]
    print(f"{row:<8}{d:>14,.0f}{p50:>10.1f}{p99:>10.1f}{c:>24.2f}")
print(f"tls/plain: throughput {med['tls'][0] / med['plain'][0]:.2f}x, p50 {med['tls'][1] / med['plain'][1]:.2f}x, "
      f"redis CPU per decision {med['tls'][3] / med['plain'][3]:.2f}x")
PY
