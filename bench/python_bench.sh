#!/usr/bin/env bash
# Decisions/s from one Python process: the seed's class (bench/seed_limiter.py: redis-py, one
# EVALSHA per decision) against ratekeeper's module (bench/python_module.py) one decision at a
# time (sync), from threads, with asyncio (many in flight), 1000 per call (check_many) and
# 1000 per call with 4 calls in flight (check_many_async), the last three coalesced into batch
# calls, on
# one redis-server, over the same keys and limits. Rows are interleaved within each of
# --repeat runs; the table shows medians, the ratio to the seed's class, and Redis CPU per
# decision (Δ used_cpu_sys + used_cpu_user of INFO cpu over the decisions).
#
# With --before DIR (a build of another version of the module), its asyncio and check_many
# rows run too, interleaved with the others.
#
#   bash bench/python_bench.sh [--build DIR] [--before DIR] [--requests N] [--keys K] [--repeat R]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build before_build= requests=100000 keys=10000 repeat=3
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --before) before_build=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "python_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for b in "$build" ${before_build:+"$before_build"}; do
  [[ -f $b/python/ratekeeper/__init__.py ]] || { echo "python_bench.sh: build the module first (cmake --build $b --target ratekeeper_python)" >&2; exit 1; }
done
workdir=$(mktemp -d)
redis_pid=
cleanup() {
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. bench/ports.sh
port=$(free_port 17600) || { echo "python_bench.sh: no free loopback port" >&2; exit 1; }
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir" \
  --daemonize no >"$workdir/redis.log" 2>&1 &
redis_pid=$!
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do
  [[ $(cli ping 2>/dev/null || true) == PONG ]] && break
  sleep 0.05
done
cpu() { cli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }

# One row: its name, then the command printing one JSON line with decisions_per_s.
row() {
  local name=$1
  shift
  cli flushall >/dev/null
  local before after out
  before=$(cpu)
  out=$("$@")
  after=$(cpu)
  /usr/bin/python3 - "$name" "$out" "$before" "$after" "$requests" >>"$workdir/rows" <<'PY'
import json, sys
name, out, before, after, n = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
print(f"{name}\t{out['decisions_per_s']:.0f}\t{(after - before) * 1e6 / n:.2f}\t{out['allowed'] / n:.3f}")
PY
}

common=(--port "$port" --requests "$requests" --keys "$keys" --capacity 100 --rate 100)
module() { PYTHONPATH=$build/python PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 bench/python_module.py "${common[@]}" "$@"; }
module_before() { PYTHONPATH=$before_build/python PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 bench/python_module.py "${common[@]}" "$@"; }
for ((r = 1; r <= repeat; r++)); do
  row "seed class (redis-py)" /usr/bin/python3 bench/seed_limiter.py "${common[@]}"
  row "module, sync" module --mode sync
  row "module, 4 threads" module --mode threads --threads 4
  row "module, asyncio 256 in flight" module --mode async --in-flight 256
  row "module, check_many of 1000" module --mode batch --batch 1000
  row "module, check_many_async of 1000, 4 in flight" module --mode batch-async --batch 1000 --in-flight 4
  if [[ -n $before_build ]]; then
    row "module before, asyncio 256 in flight" module_before --mode async --in-flight 256
    row "module before, check_many of 1000" module_before --mode batch --batch 1000
    row "module before, check_many_async of 1000, 4 in flight" module_before --mode batch-async --batch 1000 --in-flight 4
  fi
done

/usr/bin/python3 - "$workdir/rows" "$requests" "$keys" "$repeat" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, per_s, cpu, admitted = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append((float(per_s), float(cpu), float(admitted)))
print(f"{sys.argv[2]} decisions over {sys.argv[3]} keys from one Python process, medians of {sys.argv[4]} runs")
print("| row | decisions/s | × seed class | Redis CPU µs / decision | admitted |")
print("|---|---:|---:|---:|---:|")
seed = statistics.median(r[0] for r in rows["seed class (redis-py)"])
for name, runs in rows.items():
    med = [statistics.median(r[i] for r in runs) for i in range(3)]
    print(f"| {name} | {med[0]:.0f} | {med[0] / seed:.2f}× | {med[1]:.2f} | {med[2]:.3f} |")
PY
