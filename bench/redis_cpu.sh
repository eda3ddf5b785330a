#!/usr/bin/env bash
# Redis CPU per decision: what each client costs the redis-server behind it, side by side in
# one run against one redis-server (started here on a free loopback port, no persistence,
# stopped at exit), over the same number of keys. Redis CPU is Δ(used_cpu_sys + used_cpu_user)
# of `INFO cpu` over a row divided by its decisions; each row runs after FLUSHALL, SCRIPT
# FLUSH, FUNCTION FLUSH and CONFIG RESETSTAT; the rows are interleaved within each of --repeat
# runs and the table shows medians. Builds nothing: ratekeeper comes from $RATEKEEPER
# (default ./build/ratekeeper).
#
#   bench/redis_cpu.sh [--requests N] [--keys K] [--concurrency C] [--pipeline P]
#                      [--capacity X] [--rate Y] [--floor-batch B] [--repeat R] [--before PATH]
#
# Rows (N decisions each, keys uniform over K):
#   ratekeeper coalesced   ratekeeper bench --concurrency C (checks coalesced into batch calls)
#   ratekeeper one         the same with --max-batch 1 (one script call per decision)
#   ratekeeper before …    with --before PATH: both rows again with that binary (a build of
#                          an earlier commit), in the same runs, for a before/after comparison
#   rate-limiter-flexible  RateLimiterRedis on ioredis (auto-pipelining), C in flight; the npm
#                          packages are installed on first use under
#                          ${XDG_CACHE_HOME:-~/.cache}/ratekeeper-bench/node (pinned below)
#   seed script            bench/seed_limiter.py's Lua (HMGET/HMSET/EXPIRE) by redis-benchmark
#                          -c C -P P, EVALSHA over random keys
#   seed Python class      bench/seed_limiter.py: TokenBucketRateLimiter looping on one
#                          connection (/usr/bin/python3 with Debian's python3-redis)
#   floor: GCRA batch      bench/gcra_floor.lua by redis-benchmark -c C -P P, B keys per call
#   floor: GCRA, 1 key     the same, one key per call
#   floor: EVAL return 1   redis-benchmark -c C -P P EVAL "return 1" 0
#   floor: GET             redis-benchmark -c C -P P GET over K existing keys (no Lua)
# Token bucket rows: capacity X, refill Y/s (rate-limiter-flexible: X points per 60 s; the
# GCRA floor: the same interval and burst), so that nearly every decision is admitted.
# Output: the table | client | decisions/s | Redis CPU µs / decision | (medians), a detail
# table (each run's figures; calls per decision and the in-command µs per call from INFO
# commandstats for the commands the client sends: EVAL, EVALSHA, FCALL and their _RO forms,
# GET for the GET row; in-command time is wall time inside the command, without reading,
# parsing and replying, so it grows when the machine is busy; Redis CPU per call; the share
# admitted where the client reports it), then the ratios the goals are stated in.
set -euo pipefail
cd "$(dirname "$0")/.."

requests=200000
keys=10000
concurrency=50
pipeline=16
capacity=100
rate=100
floor_batch=32
repeat=3
ratekeeper=${RATEKEEPER:-./build/ratekeeper}
before=
rlf_version=11.4.0
ioredis_version=5.9.3
node_dir=${XDG_CACHE_HOME:-$HOME/.cache}/ratekeeper-bench/node
python=/usr/bin/python3

usage() { sed -n '10,11p' "$0" | sed 's/^# \{0,1\}//'; }
need_value() { [[ $# -ge 2 && -n $2 ]] || { echo "redis_cpu.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --requests) need_value "$@"; requests=$2; shift 2 ;;
    --keys) need_value "$@"; keys=$2; shift 2 ;;
    --concurrency) need_value "$@"; concurrency=$2; shift 2 ;;
    --pipeline) need_value "$@"; pipeline=$2; shift 2 ;;
    --capacity) need_value "$@"; capacity=$2; shift 2 ;;
    --rate) need_value "$@"; rate=$2; shift 2 ;;
    --floor-batch) need_value "$@"; floor_batch=$2; shift 2 ;;
    --repeat) need_value "$@"; repeat=$2; shift 2 ;;
    --before) need_value "$@"; before=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "redis_cpu.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for v in requests keys concurrency pipeline capacity floor_batch repeat; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "redis_cpu.sh: --${v//_/-} must be a positive integer, got '${!v}'" >&2; exit 2; }
done
[[ $rate =~ ^[0-9]+(\.[0-9]+)?$ && ! $rate =~ ^0+(\.0+)?$ ]] || { echo "redis_cpu.sh: --rate must be a positive number, got '$rate'" >&2; exit 2; }
((floor_batch <= 1000)) || { echo "redis_cpu.sh: --floor-batch must be at most 1000, got $floor_batch" >&2; exit 2; }
((requests >= floor_batch)) || { echo "redis_cpu.sh: --requests must be at least --floor-batch ($floor_batch)" >&2; exit 2; }
[[ -x $ratekeeper ]] || { echo "redis_cpu.sh: no executable at '$ratekeeper' (set RATEKEEPER)" >&2; exit 2; }
[[ -z $before || -x $before ]] || { echo "redis_cpu.sh: --before: no executable at '$before'" >&2; exit 2; }
for tool in redis-server redis-cli redis-benchmark bc node npm; do
  command -v "$tool" >/dev/null || { echo "redis_cpu.sh: $tool not found" >&2; exit 2; }
done
[[ -x $python ]] || { echo "redis_cpu.sh: $python not found" >&2; exit 2; }
if ! "$python" -c 'import redis' 2>/dev/null; then
  echo "redis_cpu.sh: installing python3-redis (Debian) for the seed's Python limiter" >&2
  if ((EUID == 0)) && command -v apt-get >/dev/null; then
    apt-get install -y -q python3-redis >&2 || { apt-get update -q >&2 && apt-get install -y -q python3-redis >&2; }
  fi
  "$python" -c 'import redis' 2>/dev/null || { echo "redis_cpu.sh: $python has no redis module (apt-get install python3-redis)" >&2; exit 2; }
fi

# rate-limiter-flexible and ioredis, pinned, outside the tree; installed once.
node_version_of() { node -p "require('$node_dir/node_modules/$1/package.json').version" 2>/dev/null || true; }
if [[ $(node_version_of rate-limiter-flexible) != "$rlf_version" || $(node_version_of ioredis) != "$ioredis_version" ]]; then
  echo "redis_cpu.sh: installing rate-limiter-flexible@$rlf_version ioredis@$ioredis_version into $node_dir" >&2
  mkdir -p "$node_dir"
  [[ -f $node_dir/package.json ]] || echo '{"private": true}' >"$node_dir/package.json"
  (cd "$node_dir" && npm install --no-audit --no-fund --save-exact --loglevel=error \
    "rate-limiter-flexible@$rlf_version" "ioredis@$ioredis_version" >&2)
  [[ $(node_version_of rate-limiter-flexible) == "$rlf_version" && $(node_version_of ioredis) == "$ioredis_version" ]] ||
    { echo "redis_cpu.sh: npm install into $node_dir failed" >&2; exit 1; }
fi

workdir=$(mktemp -d)
redis_pid=
child_pid=
cleanup() {
  if [[ -n $child_pid ]]; then
    kill "$child_pid" 2>/dev/null || true
    wait "$child_pid" 2>/dev/null || true
  fi
  if [[ -n $redis_pid ]]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs a client in the background (so that cleanup can stop it), its stdout into $workdir/out.
run_child() {
  "$@" >"$workdir/out" &
  child_pid=$!
  local rc=0
  wait "$child_pid" || rc=$?
  child_pid=
  ((rc == 0)) || { echo "redis_cpu.sh: '$1' failed (exit $rc)" >&2; exit 1; }
}

. bench/ports.sh
port=$(free_port 17400) || { echo "redis_cpu.sh: no free loopback port" >&2; exit 1; }
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir" \
  --daemonize no >"$workdir/redis.log" 2>&1 &
redis_pid=$!
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do
  [[ $(cli ping 2>/dev/null || true) == PONG ]] && break
  sleep 0.05
done
[[ $(cli ping 2>/dev/null || true) == PONG ]] || { echo "redis_cpu.sh: redis-server did not start:" >&2; cat "$workdir/redis.log" >&2; exit 1; }
store="redis://127.0.0.1:$port"

seed_lua=$("$python" bench/seed_limiter.py --print-script)
floor_lua=$(cat bench/gcra_floor.lua)
period_ms=$(echo "scale=6; 1000 / $rate" | bc)
# GCRA in whole milliseconds: interval = 1000 / rate (at least 1), tolerance = (capacity - 1) intervals.
floor_interval=$(printf '%.0f' "$period_ms")
((floor_interval >= 1)) || floor_interval=1
floor_tolerance=$(((capacity - 1) * floor_interval))

# State before each row: no keys, no scripts or functions, fresh statistics.
reset_server() {
  cli FLUSHALL >/dev/null
  cli SCRIPT FLUSH >/dev/null
  cli FUNCTION FLUSH >/dev/null
  cli CONFIG RESETSTAT >/dev/null
}
load_script() {  # text → sha, checked
  local sha
  sha=$(printf '%s' "$1" | cli -x SCRIPT LOAD)
  [[ $sha =~ ^[0-9a-f]{40}$ ]] || { echo "redis_cpu.sh: SCRIPT LOAD failed: $sha" >&2; exit 1; }
  echo "$sha"
}
server_cpu() {
  cli INFO cpu | tr -d '\r' | sed -n 's/^used_cpu_\(user\|sys\):\([0-9.]*\)$/\2/p' | paste -sd+ | bc
}
error_replies() { cli INFO stats | tr -d '\r' | sed -n 's/^total_error_replies://p'; }
# "calls usec" summed over the commandstats entries named in $1 (a regex of command names).
command_stats() {
  cli INFO commandstats | tr -d '\r' |
    sed -n "s/^cmdstat_\($1\):calls=\([0-9]*\),usec=\([0-9]*\),.*/\2 \3/p" |
    awk '{c += $1; u += $2} END {print c + 0, u + 0}'
}
script_commands='eval\|evalsha\|eval_ro\|evalsha_ro\|fcall\|fcall_ro'

results="$workdir/results.tsv"  # name decisions/s cpu_us/decision calls/decision in_command_us/call admitted
: >"$results"
# A row: begin_row, the client, end_row (right after the client: Redis CPU and command
# statistics before anything else is asked of the server), then record_row.
cpu0=
cpu1=
stats=
begin_row() { cpu0=$(server_cpu); }
end_row() {  # commands_regex
  cpu1=$(server_cpu)
  stats=$(command_stats "$1")
}
# record_row name decisions decisions_per_s admitted (admitted < 0: not known)
record_row() {
  echo "$1 $2 $3 $4 $cpu0 $cpu1 $stats" | awk '{
    calls = $7; usec = $8
    printf "%s\t%.0f\t%.3f\t%.4f\t%s\t%s\n", $1, $3, ($6 - $5) * 1e6 / $2, calls / $2,
      (calls > 0 ? sprintf("%.2f", usec / calls) : "-"), ($4 >= 0 ? sprintf("%.4f", $4 / $2) : "-")
  }' | sed 's/_/ /g' >>"$results"
}

run_ratekeeper() {  # name max_batch binary
  reset_server
  begin_row
  run_child "$3" bench --store "$store" --algorithm token_bucket --keys "$keys" \
    --concurrency "$concurrency" --requests "$requests" --capacity "$capacity" --rate "$rate" \
    --max-batch "$2" --json
  end_row "$script_commands"
  local fields
  fields=$("$python" - "$workdir/out" "$1" <<'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read())
if j["errors"]:
    sys.exit(f"redis_cpu.sh: {sys.argv[2]}: {j['errors']} errors: {j.get('first_error')}")
print(j["requests"], j["decisions_per_s"], j["allowed"])
EOF
  )
  # shellcheck disable=SC2086
  record_row "$1" $fields
}

run_rlf() {
  reset_server
  begin_row
  run_child env NODE_PATH="$node_dir/node_modules" node bench/rlf_bench.js "$port" "$requests" \
    "$keys" "$concurrency" "$capacity" 60
  end_row "$script_commands"
  local fields
  fields=$("$python" - "$workdir/out" <<'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read())
if j["errors"]:
    sys.exit(f"redis_cpu.sh: rate-limiter-flexible: {j['errors']} errors: {j['first_error']}")
print(j["decisions"], j["decisions_per_s"], j["allowed"])
EOF
  )
  # shellcheck disable=SC2086
  record_row rate-limiter-flexible $fields
}

run_seed_python() {
  reset_server
  begin_row
  run_child "$python" bench/seed_limiter.py --port "$port" --requests "$requests" --keys "$keys" \
    --capacity "$capacity" --rate "$rate"
  end_row "$script_commands"
  local fields
  fields=$("$python" -c 'import json, sys; j = json.load(open(sys.argv[1])); print(j["decisions"], j["decisions_per_s"], j["allowed"])' "$workdir/out")
  # shellcheck disable=SC2086
  record_row seed_Python_class $fields
}

# redis_benchmark name decisions_per_call commands_regex command...: requests / decisions_per_call
# calls of the command; sets $decisions and $decisions_per_s; the caller records the row.
decisions=
decisions_per_s=
redis_benchmark() {
  local name=$1 per_call=$2 commands=$3
  shift 3
  local calls=$((requests / per_call))
  begin_row
  run_child redis-benchmark -h 127.0.0.1 -p "$port" -c "$concurrency" -P "$pipeline" \
    -n "$calls" -r "$keys" --csv "$@"
  end_row "$commands"
  local errors rps
  errors=$(error_replies)
  [[ $errors == 0 ]] || { echo "redis_cpu.sh: $name: $errors error replies" >&2; exit 1; }
  # CSV: "test","rps",...: the last line is the result.
  rps=$(tail -n 1 "$workdir/out" | cut -d, -f2 | tr -d '"')
  [[ $rps =~ ^[0-9.]+$ ]] || { echo "redis_cpu.sh: $name: no result from redis-benchmark" >&2; cat "$workdir/out" >&2; exit 1; }
  # redis-benchmark may send a few more than -n (whole pipelines): count what the server ran.
  decisions=$((${stats%% *} * per_call))
  ((decisions > 0)) || { echo "redis_cpu.sh: $name: the server counted no $commands calls" >&2; exit 1; }
  decisions_per_s=$(echo "$rps * $per_call" | bc)
}

run_seed_script() {
  reset_server
  local sha now admitted
  sha=$(load_script "$seed_lua")
  now=$(date +%s.%N)
  redis_benchmark seed_script 1 "$script_commands" \
    EVALSHA "$sha" 1 'ratelimit:user:__rand_int__' "$capacity" "$rate" "$now" 1
  # One fixed "now": no refill, so every admitted decision took exactly one token.
  admitted=$(cli EVAL "local n = 0 for _, k in ipairs(redis.call('KEYS', 'ratelimit:user:*')) do
      n = n + ARGV[1] - tonumber(redis.call('HGET', k, 'tokens')) end return n" 0 "$capacity")
  record_row seed_script "$decisions" "$decisions_per_s" "$admitted"
}

run_floor_gcra() {  # keys per call
  reset_server
  local sha i key_args=()
  sha=$(load_script "$floor_lua")
  for ((i = 0; i < $1; i++)); do key_args+=('gcra:__rand_int__'); done
  redis_benchmark floor_gcra "$1" "$script_commands" \
    EVALSHA "$sha" "$1" "${key_args[@]}" "$floor_interval" "$floor_tolerance"
  if (($1 == 1)); then
    record_row 'floor:_GCRA,_1_key_per_call' "$decisions" "$decisions_per_s" -1
  else
    record_row "floor:_GCRA_batch,_$1_keys_per_call" "$decisions" "$decisions_per_s" -1
  fi
}

run_floor_eval() {
  reset_server
  redis_benchmark floor_eval 1 "$script_commands" EVAL 'return 1' 0
  record_row 'floor:_EVAL_"return_1"' "$decisions" "$decisions_per_s" -1
}

run_floor_get() {
  reset_server
  # The keys redis-benchmark's __rand_int__ produces (12 digits), all present.
  cli EVAL "for i = 0, $((keys - 1)) do redis.call('SET', string.format('key:%012d', i), 'x') end" 0 >/dev/null
  cli CONFIG RESETSTAT >/dev/null
  redis_benchmark floor_get 1 get GET 'key:__rand_int__'
  record_row 'floor:_GET' "$decisions" "$decisions_per_s" -1
}

rlf_line="rate-limiter-flexible $rlf_version, ioredis $ioredis_version (node $(node --version))"
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port;" \
  "$requests decisions per row over $keys keys; concurrency $concurrency, redis-benchmark -P $pipeline;" \
  "capacity $capacity, rate $rate/s; $repeat runs"
echo "$rlf_line; redis-py $("$python" -c 'import redis; print(redis.__version__)')" \
  "(python $("$python" -c 'import platform; print(platform.python_version())'))"
echo "ratekeeper: $ratekeeper ($("$ratekeeper" --version 2>/dev/null | head -n 1 || true))"
[[ -z $before ]] || echo "ratekeeper before: $before ($("$before" --version 2>/dev/null | head -n 1 || true))"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$repeat"); do
  if [[ -n $before ]]; then
    run_ratekeeper ratekeeper_before_coalesced 64 "$before"
    run_ratekeeper ratekeeper_before_--max-batch_1 1 "$before"
  fi
  run_ratekeeper ratekeeper_coalesced 64 "$ratekeeper"
  run_ratekeeper ratekeeper_--max-batch_1 1 "$ratekeeper"
  run_rlf
  run_seed_script
  run_seed_python
  run_floor_gcra "$floor_batch"
  run_floor_gcra 1
  run_floor_eval
  run_floor_get
  echo "run $i/$repeat done" >&2
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$results" "$concurrency" "$pipeline" "$rlf_version" "$ioredis_version" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *vals = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append(vals)
c, p, rlf, ioredis = sys.argv[2:6]
labels = {
    "ratekeeper coalesced": f"ratekeeper bench c={c} (coalesced)",
    "ratekeeper --max-batch 1": f"ratekeeper bench c={c} `--max-batch 1`",
    "ratekeeper before coalesced": f"ratekeeper (before) bench c={c} (coalesced)",
    "ratekeeper before --max-batch 1": f"ratekeeper (before) bench c={c} `--max-batch 1`",
    "rate-limiter-flexible": f"rate-limiter-flexible {rlf} (ioredis {ioredis} auto-pipelining, c={c})",
    "seed script": f"seed script (HMGET/HMSET/EXPIRE), redis-benchmark -c {c} -P {p}",
    "seed Python class": "seed Python class (redis-py), one connection",
}

def med(runs, i):
    vals = [float(r[i]) for r in runs if r[i] != "-" and float(r[i]) >= 0]
    return statistics.median(vals) if vals else None

def label(name):
    if name in labels:
        return labels[name]
    if name.startswith("floor: "):
        return f"floor: {name[7:]} (redis-benchmark -c {c} -P {p})"
    return name

m = {}
for name, runs in rows.items():
    m[name] = (med(runs, 0), med(runs, 1))
print()
print("| client | decisions/s | Redis CPU µs / decision |")
print("|---|---:|---:|")
for name, (rate, cpu) in m.items():
    print(f"| {label(name)} | {rate:,.0f} | {cpu:.2f} |")
print()
print("| client | decisions/s per run | Redis CPU µs / decision per run | calls / decision "
      "| Redis CPU µs / call | in-command µs / call | admitted |")
print("|---|---|---|---:|---:|---:|---:|")
for name, runs in rows.items():
    rates = ", ".join(f"{float(r[0]):,.0f}" for r in runs)
    cpus = ", ".join(f"{float(r[1]):.2f}" for r in runs)
    calls, usec, adm = med(runs, 2), med(runs, 3), med(runs, 4)
    per_call = m[name][1] / calls if calls else None
    print(f"| {label(name)} | {rates} | {cpus} | {calls:.3f} | "
          f"{'-' if per_call is None else f'{per_call:.2f}'} | "
          f"{'-' if usec is None else f'{usec:.2f}'} | {'-' if adm is None else f'{adm:.1%}'} |")
print()

def ratio(text, a, b, goal, higher):
    if a is None or b is None or not b:
        return
    r = a / b
    ok = r >= goal if higher else r <= goal
    print(f"- {text}: {r:.2f}× (goal {'≥' if higher else '≤'} {goal}×: {'met' if ok else 'not met'})")

rk, one = m.get("ratekeeper coalesced"), m.get("ratekeeper --max-batch 1")
ratio("ratekeeper coalesced / rate-limiter-flexible, decisions/s", rk[0], m["rate-limiter-flexible"][0], 2, True)
ratio("ratekeeper coalesced / seed Python class, decisions/s", rk[0], m["seed Python class"][0], 10, True)
ratio("ratekeeper coalesced / seed script, Redis CPU per decision", rk[1], m["seed script"][1], 0.55, False)
ratio("ratekeeper --max-batch 1 / seed script, Redis CPU per decision", one[1], m["seed script"][1], 1, False)
for kind in ("coalesced", "--max-batch 1"):
    now, old = m.get(f"ratekeeper {kind}"), m.get(f"ratekeeper before {kind}")
    if old:
        print(f"- ratekeeper {kind} / before: {now[0] / old[0]:.2f}× decisions/s, "
              f"{now[1] / old[1]:.2f}× Redis CPU per decision")
print(f"- ratekeeper coalesced: {rk[1]:.2f} µs of Redis CPU per decision "
      f"(goal ≤ 3.0: {'met' if rk[1] <= 3.0 else 'not met'}); `--max-batch 1`: {one[1]:.2f} µs "
      f"(goal ≤ 5: {'met' if one[1] <= 5 else 'not met'})")
EOF
