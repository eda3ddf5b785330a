#!/usr/bin/env bash
# One hot key through one instance with a leased limit: `ratekeeper bench --lease-max` paced
# at --pace decisions/s against a fresh redis-server, and the Redis calls it cost, counted by
# the server itself (INFO commandstats: FCALL + EVALSHA + EVAL calls, the warm-up check included)
# per admitted decision. Builds nothing: the binary comes from $RATEKEEPER (default
# ./build/ratekeeper).
#
#   bench/lease_calls.sh [--requests N] [--pace P] [--lease-max M] [--lease-ttl-ms T]
#                        [--algorithm token_bucket|fixed_window] [--concurrency C]
#
# The limit is far above the offered load (token bucket: capacity and refill 10^6; fixed
# window: 10^9 per minute): every decision should be admitted.
set -euo pipefail

requests=500000
pace=50000
lease_max=500
lease_ttl_ms=1000
algorithm=token_bucket
concurrency=4
ratekeeper=${RATEKEEPER:-./build/ratekeeper}

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
need_value() { [[ $# -ge 2 && -n $2 ]] || { echo "lease_calls.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --requests) need_value "$@"; requests=$2; shift 2 ;;
    --pace) need_value "$@"; pace=$2; shift 2 ;;
    --lease-max) need_value "$@"; lease_max=$2; shift 2 ;;
    --lease-ttl-ms) need_value "$@"; lease_ttl_ms=$2; shift 2 ;;
    --algorithm) need_value "$@"; algorithm=$2; shift 2 ;;
    --concurrency) need_value "$@"; concurrency=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "lease_calls.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for v in requests pace lease_max lease_ttl_ms concurrency; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "lease_calls.sh: --${v//_/-} must be a positive integer, got '${!v}'" >&2; exit 2; }
done
case $algorithm in
  token_bucket) limit_args=(--capacity 1000000 --rate 1000000) ;;
  fixed_window) limit_args=(--limit 1000000000 --window-ms 60000) ;;
  *) echo "lease_calls.sh: --algorithm must be token_bucket or fixed_window, got '$algorithm'" >&2; exit 2 ;;
esac
[[ -x $ratekeeper ]] || { echo "lease_calls.sh: no executable at '$ratekeeper' (set RATEKEEPER)" >&2; exit 2; }
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "lease_calls.sh: $tool not found" >&2; exit 2; }
done

. "$(dirname "$0")/ports.sh"
port=$(free_port 17400)
workdir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$workdir"' EXIT
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir" \
  --daemonize yes --logfile "$workdir/redis.log"
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

redis-cli -p "$port" config resetstat >/dev/null
out=$("$ratekeeper" bench --store "redis://127.0.0.1:$port" --keys 1 --algorithm "$algorithm" "${limit_args[@]}" \
  --requests "$requests" --concurrency "$concurrency" --pace "$pace" --lease-max "$lease_max" \
  --lease-ttl-ms "$lease_ttl_ms" --json)
calls=$(redis-cli -p "$port" info commandstats |
  python3 -c 'import sys, re; print(sum(int(m.group(1)) for m in re.finditer(r"cmdstat_(?:fcall|evalsha|eval):calls=(\d+)", sys.stdin.read())))')
python3 - "$out" "$calls" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); calls = int(sys.argv[2])
l = r["lease"]
print(f"{r['algorithm']} lease max {l['max']} ttl {l['ttl_ms']} ms, {r['requests']} decisions at "
      f"{r['decisions_per_s']:.0f}/s: {r['allowed']} admitted, {r['denied']} denied, {r['errors']} errors")
print(f"grants {l['grants']}, returns {l['returns']}, local admissions {l['local_admissions']}; "
      f"latency p50 {r['latency_us']['p50']:.1f} us, p99 {r['latency_us']['p99']:.1f} us")
print(f"Redis script calls (INFO commandstats) {calls}: {calls / max(1, r['allowed']):.4f} per admitted decision")
PY
