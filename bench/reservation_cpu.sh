#!/usr/bin/env bash
# Redis CPU per request with a reservation (reserve, then settle: two script calls) and per
# request holding a concurrency slot (reserve, then release) next to a plain check, in one
# run against one redis-server (started here on a free loopback port, no persistence, stopped
# at exit), over the same keys. Redis CPU is Δ(used_cpu_sys + used_cpu_user) of `INFO cpu`
# over a row divided by its requests; each row runs after FLUSHALL and CONFIG RESETSTAT; the
# rows are interleaved within each of --repeat runs and the table shows medians. Builds
# nothing: ratekeeper comes from $RATEKEEPER (default ./build/ratekeeper).
#
#   bench/reservation_cpu.sh [--requests N] [--keys K] [--concurrency C] [--repeat R]
#
# Rows (N requests each, keys uniform over K, a token bucket far above the load):
#   check, coalesced       ratekeeper bench: checks coalesced into batch calls
#   check, one call        the same with --max-batch 1: one script call per check
#   reserve + settle       --cost 100 --settle-cost 60: each request reserves 100, then
#                          settles to 60 (the difference given back), one call each way
#   hold a slot + release  --hold-slots S: each request reserves its cost and one of S
#                          concurrency slots of a key next to its own (same hash tag), then
#                          releases the slot (settles at the estimate), one call each way;
#                          S = max(1000, concurrency): the slots never deny
set -euo pipefail
cd "$(dirname "$0")/.."

requests=100000
keys=10000
concurrency=50
repeat=3
ratekeeper=${RATEKEEPER:-./build/ratekeeper}

usage() { sed -n '9,10p' "$0" | sed 's/^# \{0,1\}//'; }
need_value() { [[ $# -ge 2 && -n $2 ]] || { echo "reservation_cpu.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --requests) need_value "$@"; requests=$2; shift 2 ;;
    --keys) need_value "$@"; keys=$2; shift 2 ;;
    --concurrency) need_value "$@"; concurrency=$2; shift 2 ;;
    --repeat) need_value "$@"; repeat=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "reservation_cpu.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for v in requests keys concurrency repeat; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "reservation_cpu.sh: --$v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
[[ -x $ratekeeper ]] || { echo "reservation_cpu.sh: no executable at '$ratekeeper' (set RATEKEEPER)" >&2; exit 2; }
slots=$((concurrency > 1000 ? concurrency : 1000))
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "reservation_cpu.sh: $tool not found" >&2; exit 2; }
done

workdir=$(mktemp -d)
redis_pid=
cleanup() {
  if [[ -n $redis_pid ]]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. bench/ports.sh
port=$(free_port 17400) || { echo "reservation_cpu.sh: no free loopback port" >&2; exit 1; }
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir" \
  --daemonize no >"$workdir/redis.log" 2>&1 &
redis_pid=$!
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do
  [[ $(cli ping 2>/dev/null || true) == PONG ]] && break
  sleep 0.05
done
[[ $(cli ping 2>/dev/null || true) == PONG ]] || { echo "reservation_cpu.sh: redis-server did not start" >&2; exit 1; }

cpu() { cli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }

# One row: its name, then ratekeeper bench's extra arguments. Appends "name<TAB>requests/s<TAB>
# Redis CPU us per request<TAB>admitted" to $workdir/rows.
row() {
  local name=$1
  shift
  cli flushall >/dev/null
  cli config resetstat >/dev/null
  local before after out
  before=$(cpu)
  out=$("$ratekeeper" bench --store "redis://127.0.0.1:$port" --keys "$keys" --requests "$requests" \
    --concurrency "$concurrency" --capacity 1000000 --rate 1000000 --json "$@")
  after=$(cpu)
  python3 - "$name" "$out" "$before" "$after" "$requests" >>"$workdir/rows" <<'PY'
import json, sys
name, out, before, after, n = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
if out["errors"]:
    sys.exit(f"reservation_cpu.sh: {name}: {out['errors']} errors: {out.get('first_error')}")
print(f"{name}\t{out['decisions_per_s']:.0f}\t{(after - before) * 1e6 / n:.2f}\t{out['allowed'] / n:.3f}")
PY
}

for ((r = 1; r <= repeat; r++)); do
  row "check, coalesced"
  row "check, one call" --max-batch 1
  row "reserve + settle" --cost 100 --settle-cost 60
  row "hold a slot + release" --hold-slots "$slots"
done

python3 - "$workdir/rows" "$requests" "$keys" "$concurrency" "$repeat" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, per_s, cpu, admitted = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append((float(per_s), float(cpu), float(admitted)))
print(f"{sys.argv[2]} requests over {sys.argv[3]} keys, concurrency {sys.argv[4]}, medians of {sys.argv[5]} runs")
print("| row | requests/s | Redis CPU µs / request | admitted |")
print("|---|---:|---:|---:|")
med = {}
for name, runs in rows.items():
    med[name] = [statistics.median(r[i] for r in runs) for i in range(3)]
    print(f"| {name} | {med[name][0]:.0f} | {med[name][1]:.2f} | {med[name][2]:.3f} |")
base = med.get("check, one call")
co = med.get("check, coalesced")
for name in ("reserve + settle", "hold a slot + release"):
    res = med.get(name)
    if base and res and base[1] > 0:
        print(f"{name} / check, one call: Redis CPU {res[1] / base[1]:.2f}x")
    if co and res and co[1] > 0:
        print(f"{name} / check, coalesced: Redis CPU {res[1] / co[1]:.2f}x")
PY
