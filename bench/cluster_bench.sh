#!/usr/bin/env bash
# Runs `ratekeeper bench` against one standalone redis-server and against a 3-master Redis
# Cluster (one replica each), in one run, with the same workload, and prints the medians of
# --repeat runs side by side, with the Redis CPU per decision (INFO cpu, user + system, of
# every redis-server of the topology, over the run's decisions). --before PATH also runs
# another build of ratekeeper on the cluster, alternating with this one (a before/after). Both topologies run on this machine: on a few cores this shows
# the cluster client's overhead (slot routing, one connection per master, more processes
# sharing the CPUs), not scale-out. Builds nothing: the binary comes from $RATEKEEPER
# (default ./build/ratekeeper).
#
#   bench/cluster_bench.sh [--requests N] [--concurrency C] [--keys K] [--algorithm A]
#                          [--repeat R] [--threads T] [--before PATH]
set -euo pipefail

requests=200000
concurrency=64
keys=10000
algorithm=token_bucket
repeat=3
threads=1
ratekeeper=${RATEKEEPER:-./build/ratekeeper}
before=

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
need_value() { [[ $# -ge 2 && -n $2 ]] || { echo "cluster_bench.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --requests) need_value "$@"; requests=$2; shift 2 ;;
    --concurrency) need_value "$@"; concurrency=$2; shift 2 ;;
    --keys) need_value "$@"; keys=$2; shift 2 ;;
    --algorithm) need_value "$@"; algorithm=$2; shift 2 ;;
    --repeat) need_value "$@"; repeat=$2; shift 2 ;;
    --threads) need_value "$@"; threads=$2; shift 2 ;;
    --before) need_value "$@"; before=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "cluster_bench.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for v in requests concurrency keys repeat threads; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "cluster_bench.sh: --$v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
[[ -x $ratekeeper ]] || { echo "cluster_bench.sh: no executable at '$ratekeeper' (set RATEKEEPER)" >&2; exit 2; }
[[ -z $before || -x $before ]] || { echo "cluster_bench.sh: --before: no executable at '$before'" >&2; exit 2; }
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "cluster_bench.sh: $tool not found" >&2; exit 2; }
done

workdir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$workdir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# A cluster node also listens on port + 10000 (the cluster bus): both must be free and < 65536.
free_cluster_port() {
  python3 - <<'PY'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    p = random.randint(20000, 55000)
    if free(p) and free(p + 10000):
        print(p)
        break
PY
}
start_server() {  # port extra-args...
  local port=$1
  shift
  mkdir -p "$workdir/$port"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir/$port" \
    --daemonize no "$@" >"$workdir/$port/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do
    [[ $(redis-cli -p "$port" ping 2>/dev/null || true) == PONG ]] && return 0
    sleep 0.05
  done
  echo "cluster_bench.sh: redis-server on $port did not start:" >&2
  cat "$workdir/$port/redis.log" >&2
  exit 1
}

standalone=$(free_port)
start_server "$standalone"

cluster_ports=()
for _ in 1 2 3 4 5 6; do
  p=$(free_cluster_port)
  cluster_ports+=("$p")
  start_server "$p" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000
done
nodes=()
for p in "${cluster_ports[@]}"; do nodes+=("127.0.0.1:$p"); done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$workdir/create.log" 2>&1 ||
  { echo "cluster_bench.sh: redis-cli --cluster create failed:" >&2; cat "$workdir/create.log" >&2; exit 1; }
for _ in $(seq 400); do
  ok=1
  for p in "${cluster_ports[@]}"; do
    redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' || ok=0
  done
  ((ok)) && break
  sleep 0.05
done
((ok)) || { echo "cluster_bench.sh: the cluster did not reach cluster_state:ok" >&2; exit 1; }
cluster_url="redis-cluster://$(IFS=,; echo "${nodes[*]}")"

flush_all() {
  redis-cli -p "$standalone" FLUSHALL >/dev/null
  for p in "${cluster_ports[@]}"; do
    redis-cli -p "$p" FLUSHALL >/dev/null 2>&1 || true
    redis-cli -p "$p" CONFIG RESETSTAT >/dev/null
  done
}

results="$workdir/results.tsv"  # name, decisions/s, p50, p99, p999, Redis CPU us per decision
cpu_of() {  # ports...: CPU seconds (user + system) the servers have used so far
  for p in "$@"; do
    redis-cli -p "$p" info cpu | tr -d '\r' | sed -n 's/^used_cpu_\(sys\|user\):\(.*\)/\2/p'
  done | paste -sd+ - | bc -l
}
run() {  # name store binary ports...
  local name=$1 store=$2 binary=$3
  shift 3
  flush_all
  local out cpu0 cpu1
  cpu0=$(cpu_of "$@")
  out=$("$binary" bench --store "$store" --algorithm "$algorithm" --keys "$keys" \
    --concurrency "$concurrency" --requests "$requests" --threads "$threads" --timeout-ms 1000 --json)
  cpu1=$(cpu_of "$@")
  python3 - "$out" "$name" "$cpu0" "$cpu1" >>"$results" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
if j["errors"]:
    sys.exit(f"cluster_bench.sh: {sys.argv[2]}: {j['errors']} errors: {j.get('first_error')}")
l = j["latency_us"]
cpu = (float(sys.argv[4]) - float(sys.argv[3])) * 1e6 / j["requests"]
print(f"{sys.argv[2]}\t{j['decisions_per_s']:.0f}\t{l['p50']:.0f}\t{l['p99']:.0f}\t{l['p999']:.0f}\t{cpu:.2f}")
PY
}

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'); $algorithm;" \
  "$requests requests over $keys keys; concurrency $concurrency, threads $threads; $(nproc) cores;" \
  "$repeat runs each (alternating)"
# The run right after another topology's is the slower one (caches, the other servers' work
# winding down): with --before, the two builds take turns being first (A B, then B A).
for i in $(seq "$repeat"); do
  run "standalone" "redis://127.0.0.1:$standalone" "$ratekeeper" "$standalone"
  if [[ -n $before ]] && ((i % 2 == 0)); then
    run "cluster, --before" "$cluster_url" "$before" "${cluster_ports[@]}"
    run "cluster (3 masters)" "$cluster_url" "$ratekeeper" "${cluster_ports[@]}"
  else
    run "cluster (3 masters)" "$cluster_url" "$ratekeeper" "${cluster_ports[@]}"
    [[ -z $before ]] || run "cluster, --before" "$cluster_url" "$before" "${cluster_ports[@]}"
  fi
done
# Commands each master processed in the last cluster run: the load was spread.
spread=$(for p in "${cluster_ports[@]}"; do
  if [[ $(redis-cli -p "$p" role | head -n 1) == master ]]; then
    redis-cli -p "$p" info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p'
  fi
done | paste -sd/ -)

python3 - "$results" "$spread" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *vals = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append([float(v) for v in vals])
print(f"{'store':<22}{'decisions/s':>12}{'p50 us':>9}{'p99 us':>9}{'p999 us':>9}{'Redis CPU us/decision':>23}")
for name, runs in rows.items():
    med = [statistics.median(col) for col in zip(*runs)]
    print(f"{name:<22}{med[0]:>12.0f}{med[1]:>9.0f}{med[2]:>9.0f}{med[3]:>9.0f}{med[4]:>23.2f}")
base = statistics.median(r[0] for r in rows["standalone"])
clus = statistics.median(r[0] for r in rows["cluster (3 masters)"])
print(f"cluster / standalone throughput: {clus / base:.2f}; commands per master in the last cluster run: {sys.argv[2]}")
if "cluster, --before" in rows:
    prev = statistics.median(r[0] for r in rows["cluster, --before"])
    cpu = statistics.median(r[4] for r in rows["cluster (3 masters)"])
    cpu_prev = statistics.median(r[4] for r in rows["cluster, --before"])
    print(f"cluster, this build / --before: throughput {clus / prev:.2f}, Redis CPU per decision {cpu / cpu_prev:.2f}")
PY
