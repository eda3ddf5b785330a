#!/usr/bin/env bash
# Compares `ratekeeper bench` on Redis with redis-benchmark running the same embedded token
# bucket script (EVALSHA) against the same redis-server, in one run, and prints both
# throughputs and their ratio (medians of --repeat runs). Builds nothing: the binary comes
# from $RATEKEEPER (default ./build/ratekeeper).
#
#   bench/redis_baseline.sh [--requests N] [--concurrency C] [--pipeline P] [--keys K]
#                           [--capacity X] [--rate Y] [--repeat R] [--threads T]
#
# Rows:
#   redis-benchmark        -c C -P P: C connections, P commands in flight on each
#   ratekeeper c=C         C decisions in flight over the client's auto-pipelined connection
#   ratekeeper c=C*P       as many decisions in flight as redis-benchmark has commands (the
#                          client coalesces checks into calls of the batch script)
#   ratekeeper c=C*P one   the same with --max-batch 1: one call of the same token bucket
#                          script per decision, as redis-benchmark sends
#   ratekeeper memory://   the embedded store, for scale
# "cmds/read" is the number of script calls (EVALSHA, EVAL) per read from a client socket on
# the server during the run (INFO commandstats / total_reads_processed): the effective pipelining.
# CPU columns: user + system CPU of the client process (/usr/bin/time) and of redis-server
# (INFO cpu) during the run, divided by the number of decisions.
set -euo pipefail

requests=200000
concurrency=50
pipeline=16
keys=1000
capacity=100
rate=1000
repeat=3
threads=1
ratekeeper=${RATEKEEPER:-./build/ratekeeper}

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
need_value() { [[ $# -ge 2 && -n $2 ]] || { echo "redis_baseline.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --requests) need_value "$@"; requests=$2; shift 2 ;;
    --concurrency) need_value "$@"; concurrency=$2; shift 2 ;;
    --pipeline) need_value "$@"; pipeline=$2; shift 2 ;;
    --keys) need_value "$@"; keys=$2; shift 2 ;;
    --capacity) need_value "$@"; capacity=$2; shift 2 ;;
    --rate) need_value "$@"; rate=$2; shift 2 ;;
    --repeat) need_value "$@"; repeat=$2; shift 2 ;;
    --threads) need_value "$@"; threads=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "redis_baseline.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for v in requests concurrency pipeline keys capacity repeat threads; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "redis_baseline.sh: --$v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
[[ $rate =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "redis_baseline.sh: --rate must be a positive number, got '$rate'" >&2; exit 2; }
[[ -x $ratekeeper ]] || { echo "redis_baseline.sh: no executable at '$ratekeeper' (set RATEKEEPER)" >&2; exit 2; }
for tool in redis-server redis-cli redis-benchmark python3 bc /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "redis_baseline.sh: $tool not found" >&2; exit 2; }
done

# Token bucket refill interval in microseconds, as Limit::token_bucket computes it.
period_us=$(python3 -c "print(round(1e6 / float('$rate')))")

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

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir" \
  --daemonize no >"$workdir/redis.log" 2>&1 &
redis_pid=$!
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do
  [[ $(cli ping 2>/dev/null || true) == PONG ]] && break
  sleep 0.05
done
[[ $(cli ping 2>/dev/null || true) == PONG ]] || { echo "redis_baseline.sh: redis-server did not start:" >&2; cat "$workdir/redis.log" >&2; exit 1; }

script_text=$("$ratekeeper" script token_bucket)
sha=$(printf '%s' "$script_text" | cli -x SCRIPT LOAD)
[[ $sha =~ ^[0-9a-f]{40}$ ]] || { echo "redis_baseline.sh: SCRIPT LOAD failed: $sha" >&2; exit 1; }
# One call by hand: the argument layout must be accepted before anything is measured.
probe=$(cli EVALSHA "$sha" 1 'ratelimit:{bench:probe}:bench' "$capacity" "$period_us" 1 -1 2>&1)
if [[ -z $probe || $probe == *ERR* ]]; then
  echo "redis_baseline.sh: EVALSHA $sha 1 <key> $capacity $period_us 1 -1 failed: $probe" >&2
  exit 1
fi

stat() { cli INFO stats | tr -d '\r' | sed -n "s/^$1://p"; }
reset_server() { cli FLUSHALL >/dev/null; cli CONFIG RESETSTAT >/dev/null; }
# Script calls (EVALSHA and EVAL; commands run inside scripts are not counted) per read.
cmds_per_read() {
  local calls reads
  calls=$(cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_eval\(sha\)\{0,1\}:calls=\([0-9]*\).*/\2/p' | paste -sd+ | sed 's/^$/0/')
  reads=$(stat total_reads_processed)
  python3 -c "print(f'{($calls) / max($reads, 1):.1f}')"
}
error_replies() { stat total_error_replies; }

results="$workdir/results.tsv"  # name rps p50_us p99_us p999_us cmds_per_read client_cpu server_cpu

# CPU seconds (user + system) the server has used so far.
server_cpu() {
  cli INFO cpu | tr -d '\r' | sed -n 's/^used_cpu_\(user\|sys\):\([0-9.]*\)$/\2/p' | paste -sd+ | bc
}
# Microseconds of CPU per decision: seconds / requests.
per_decision() { python3 -c "print(f'{float($1) * 1e6 / $requests:.2f}')"; }
# Runs a command under /usr/bin/time; its user + system CPU seconds go to $workdir/cpu.
timed() { /usr/bin/time -f '%U+%S' -o "$workdir/cpu" "$@"; }
client_cpu() { bc <"$workdir/cpu"; }

run_redis_benchmark() {
  reset_server
  local out thread_args=() cpu0
  ((threads == 1)) || thread_args=(--threads "$threads")
  cpu0=$(server_cpu)
  out=$(timed redis-benchmark -h 127.0.0.1 -p "$port" -c "$concurrency" -P "$pipeline" \
    -n "$requests" -r "$keys" "${thread_args[@]}" --csv \
    EVALSHA "$sha" 1 'ratelimit:{bench:__rand_int__}:bench' "$capacity" "$period_us" 1 -1)
  local server client errors
  server=$(per_decision "$(server_cpu) - $cpu0")
  client=$(per_decision "$(client_cpu)")
  errors=$(error_replies)
  [[ $errors == 0 ]] || { echo "redis_baseline.sh: redis-benchmark got $errors error replies" >&2; exit 1; }
  # CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  local line
  line=$(printf '%s\n' "$out" | tail -n 1)
  python3 - "$line" "$(cmds_per_read)" "$client" "$server" >>"$results" <<'EOF'
import csv, sys
row = next(csv.reader([sys.argv[1]]))
rps, p50, p99 = float(row[1]), float(row[4]) * 1000, float(row[6]) * 1000
print(f"redis-benchmark\t{rps:.0f}\t{p50}\t{p99}\t-\t{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}")
EOF
}

run_ratekeeper() {  # name store concurrency [max_batch]
  local name=$1 store=$2 c=$3 max_batch=${4:-64}
  reset_server
  local out cpu0
  cpu0=$(server_cpu)
  out=$(timed "$ratekeeper" bench --store "$store" --algorithm token_bucket --keys "$keys" \
    --concurrency "$c" --requests "$requests" --capacity "$capacity" --rate "$rate" \
    --threads "$threads" --max-batch "$max_batch" --json)
  local per_read=- server=- client
  client=$(per_decision "$(client_cpu)")
  if [[ $store != memory://* ]]; then
    per_read=$(cmds_per_read)
    server=$(per_decision "$(server_cpu) - $cpu0")
  fi
  python3 - "$out" "$name" "$per_read" "$client" "$server" >>"$results" <<'EOF'
import json, sys
j = json.loads(sys.argv[1])
if j["errors"]:
    sys.exit(f"redis_baseline.sh: {sys.argv[2]}: {j['errors']} errors: {j.get('first_error')}")
l = j["latency_us"]
print(f"{sys.argv[2]}\t{j['decisions_per_s']:.0f}\t{l['p50']}\t{l['p99']}\t{l['p999']}\t{sys.argv[3]}"
      f"\t{sys.argv[4]}\t{sys.argv[5]}")
EOF
}

echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port;" \
  "token_bucket capacity=$capacity period=${period_us}us; $requests requests over $keys keys;" \
  "concurrency $concurrency, pipeline $pipeline, threads $threads; $repeat runs each"
: >"$results"
store="redis://127.0.0.1:$port"
wide=$((concurrency * pipeline))
for i in $(seq "$repeat"); do
  run_redis_benchmark
  run_ratekeeper "ratekeeper c=$concurrency" "$store" "$concurrency"
  if ((pipeline > 1)); then
    run_ratekeeper "ratekeeper c=$wide" "$store" "$wide"
  fi
  run_ratekeeper "ratekeeper c=$wide one" "$store" "$wide" 1
  run_ratekeeper "ratekeeper memory://" "memory://" "$concurrency"
  echo "run $i/$repeat done" >&2
done

python3 - "$results" "$concurrency" "$pipeline" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *vals = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append(vals)

def median(values):
    nums = [float(v) for v in values if v != "-"]
    return statistics.median(nums) if nums else None

def fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.1f}" if digits == 0 and v < 10 else f"{v:,.{digits}f}"

print()
print("| client | decisions/s (median) | runs | p50 us | p99 us | p999 us | cmds/read "
      "| client CPU us/decision | server CPU us/decision |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
for name, runs in rows.items():
    label = name
    if name == "redis-benchmark":
        label = f"redis-benchmark -c {sys.argv[2]} -P {sys.argv[3]}"
    each = ", ".join(f"{float(r[0]):,.0f}" for r in runs)
    cols = [fmt(median(r[0] for r in runs)), each] + [fmt(median(r[i] for r in runs)) for i in (1, 2, 3)]
    cols += [fmt(median(r[i] for r in runs), 1 if i == 4 else 2) for i in (4, 5, 6)]
    print(f"| {label} | " + " | ".join(cols) + " |")
print()
base = median(r[0] for r in rows["redis-benchmark"])
for name in rows:
    if name.startswith("ratekeeper c="):
        ratio = median(r[0] for r in rows[name]) / base
        verdict = "meets" if ratio >= 0.9 else "below"
        print(f"ratio {name} / redis-benchmark = {ratio:.3f} ({verdict} the 0.9 goal)")
EOF
