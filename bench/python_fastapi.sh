#!/usr/bin/env bash
# Requests/s of an empty FastAPI endpoint (bench/python_fastapi_app.py) under uvicorn, one
# worker, without and with ratekeeper's ASGI middleware (each request checked on a local
# redis-server, all admitted), and with the seed's own middleware (its class through redis-py,
# the same Redis) for reference, driven by wrk; the rows alternate within each of --repeat
# runs and the table shows medians: the middleware's cost is 1 − (with / without), with the
# CPU time per request of uvicorn's event loop thread and of its whole process (the store's
# thread too). A row on the memory store (decided in process, no Redis, no store thread at
# work) separates the middleware's own cost from its store's; a row of a middleware that only
# adds the same two RateLimit header fields, constant, shows what sending them costs any
# middleware (h11 and Starlette handle each field of a response several times). --before DIR
# adds a row of the middleware as built in another build directory.
#
# --instructions counts instead, under callgrind, the instructions uvicorn's process runs per
# request (its event loop and the store's thread; the same requests, wrk for --seconds after a
# warm-up): a count the machine's load does not move, where requests/s and CPU time on these
# shared cores vary from run to run by more than the 10 % the middleware is allowed. With
# uvicorn CPU-bound (one worker, many connections), requests/s go as the inverse of it. The
# event loop's thread is also counted alone: with a core to spare for the store's thread, it
# is the one requests/s wait on.
#
#   bash bench/python_fastapi.sh [--build DIR] [--before DIR] [--seconds S] [--connections C] [--repeat R]
#                                [--instructions]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build before= seconds=10 connections=32 repeat=3 instructions=
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --instructions) instructions=1; shift ;;
    *) echo "python_fastapi.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
workdir=$(mktemp -d)
redis_pid= app_pid=
cleanup() {
  [[ -n $app_pid ]] && kill "$app_pid" 2>/dev/null && wait "$app_pid" 2>/dev/null
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

. bench/ports.sh
redis_port=$(free_port 17700) || exit 1
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir" \
  --daemonize no >"$workdir/redis.log" 2>&1 &
redis_pid=$!
app_port=$(free_port 17800) || exit 1

# CPU seconds (user + system) of thread $2 of process $1, or of the whole process without $2.
cpu_of() {
  local stat=/proc/$1/stat
  [[ -n ${2:-} ]] && stat=/proc/$1/task/$2/stat
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.4f", ($14 + $15) / hz}' "$stat"
}

# Starts the app under uvicorn (app_pid), warmed up: RATEKEEPER_LIMITED, the build directory of
# the module, the store, then the command to run python3 under (none, or valgrind's).
start_app() {
  local limited=$1 from=$2 store=$3
  shift 3
  RATEKEEPER_LIMITED=$limited RATEKEEPER_STORE="$store" PYTHONPATH=$from/python PYTHONDONTWRITEBYTECODE=1 \
    "$@" /usr/bin/python3 -m uvicorn --app-dir bench python_fastapi_app:app --host 127.0.0.1 \
    --port "$app_port" --log-level warning --no-access-log --no-proxy-headers >"$workdir/app.log" 2>&1 &
  app_pid=$!
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$app_port/empty" >/dev/null 2>&1 && break
    sleep 0.05
  done
  wrk -t1 -c"$connections" -d3s "http://127.0.0.1:$app_port/empty" >/dev/null  # warm up
}

# One row: its name, RATEKEEPER_LIMITED (0, 1 or seed), the build directory of the module and
# the store (the local redis-server unless given). Appends "name<TAB>requests/s<TAB>p99 ms<TAB>loop µs/request<TAB>process µs/request".
row() {
  local name=$1 limited=$2 from=${3:-$build} store=${4:-redis://127.0.0.1:$redis_port}
  start_app "$limited" "$from" "$store"
  local loop0 process0 loop1 process1
  loop0=$(cpu_of "$app_pid" "$app_pid") process0=$(cpu_of "$app_pid")
  wrk -t1 -c"$connections" -d"${seconds}s" --latency "http://127.0.0.1:$app_port/empty" >"$workdir/wrk.out"
  loop1=$(cpu_of "$app_pid" "$app_pid") process1=$(cpu_of "$app_pid")
  kill "$app_pid"
  wait "$app_pid" 2>/dev/null || true
  app_pid=
  /usr/bin/python3 - "$name" "$workdir/wrk.out" "$loop0" "$loop1" "$process0" "$process1" >>"$workdir/rows" <<'PY'
import re, sys
text = open(sys.argv[2]).read()
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
done = int(re.search(r"(\d+) requests in", text).group(1))
loop_us = (float(sys.argv[4]) - float(sys.argv[3])) * 1e6 / done
process_us = (float(sys.argv[6]) - float(sys.argv[5])) * 1e6 / done
p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)
scale = {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
if re.search(r"Non-2xx", text):
    sys.exit(f"python_fastapi.sh: {sys.argv[1]}: non-2xx answers:\n{text}")
print(f"{sys.argv[1]}\t{rps:.0f}\t{float(p99.group(1)) * scale:.2f}\t{loop_us:.1f}\t{process_us:.1f}")
PY
}

# One row under callgrind: its name, RATEKEEPER_LIMITED, the build directory and the store.
# Appends "name<TAB>instructions per request<TAB>of the event loop's thread<TAB>requests counted".
row_instructions() {
  local name=$1 limited=$2 from=${3:-$build} store=${4:-redis://127.0.0.1:$redis_port}
  start_app "$limited" "$from" "$store" valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$workdir/callgrind.out"
  callgrind_control -z "$app_pid" >/dev/null 2>&1
  wrk -t1 -c"$connections" -d"${seconds}s" "http://127.0.0.1:$app_port/empty" >"$workdir/wrk.out"
  rm -f "$workdir"/callgrind.out.*
  callgrind_control -d "$app_pid" >/dev/null 2>&1
  kill "$app_pid"
  wait "$app_pid" 2>/dev/null || true
  app_pid=
  /usr/bin/python3 - "$name" "$workdir/wrk.out" "$workdir" >>"$workdir/rows" <<'PY'
import glob, re, sys
text = open(sys.argv[2]).read()
if re.search(r"Non-2xx", text):
    sys.exit(f"python_fastapi.sh: {sys.argv[1]}: non-2xx answers:\n{text}")
done = int(re.search(r"(\d+) requests in", text).group(1))
total = loop = 0
for dump in glob.glob(sys.argv[3] + "/callgrind.out.*"):
    content = open(dump).read()
    count = int(re.search(r"^summary: (\d+)", content, re.M).group(1))
    total += count
    if re.search(r"^thread: 1$", content, re.M):  # the main thread: uvicorn's event loop
        loop += count
print(f"{sys.argv[1]}\t{total / done:.0f}\t{loop / done:.0f}\t{done}")
PY
}

if [[ -n $instructions ]]; then
  for ((r = 1; r <= repeat; r++)); do
    row_instructions "without middleware" 0
    row_instructions "with ratekeeper.asgi (Redis)" 1
    [[ -n $before ]] && row_instructions "with ratekeeper.asgi (Redis), $before" 1 "$before"
    row_instructions "with ratekeeper.asgi (memory://: no store I/O)" 1 "$build" memory://
    row_instructions "a middleware adding the two fields alone" headers
  done
  /usr/bin/python3 - "$workdir/rows" "$seconds" "$connections" "$repeat" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, per_request, loop, done = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append((float(per_request), float(loop), int(done)))
print(f"uvicorn 1 worker under callgrind, wrk -t1 -c{sys.argv[3]} -d{sys.argv[2]}s, medians of {sys.argv[4]} runs")
print("| row | instructions / request | × without | of the event loop's thread | × without | requests counted |")
print("|---|---:|---:|---:|---:|---:|")
med = {n: statistics.median(r[0] for r in runs) for n, runs in rows.items()}
med_loop = {n: statistics.median(r[1] for r in runs) for n, runs in rows.items()}
without, without_loop = med["without middleware"], med_loop["without middleware"]
for name, runs in rows.items():
    print(f"| {name} | {med[name]:,.0f} | {med[name] / without:.3f} | {med_loop[name]:,.0f} | "
          f"{med_loop[name] / without_loop:.3f} | {sum(r[2] for r in runs)} |")
name = "with ratekeeper.asgi (Redis)"
print(f"the middleware costs {100 * (1 - without / med[name]):.1f} % of the empty endpoint's requests/s at "
      f"equal instructions per second ({without / med[name]:.3f}x); "
      f"{100 * (1 - without_loop / med_loop[name]):.1f} % counting its event loop's thread alone")
PY
  exit 0
fi

for ((r = 1; r <= repeat; r++)); do
  row "without middleware" 0
  row "with ratekeeper.asgi (Redis)" 1
  [[ -n $before ]] && row "with ratekeeper.asgi (Redis), $before" 1 "$before"
  row "with ratekeeper.asgi (memory://: no store I/O)" 1 "$build" memory://
  row "with the seed's middleware (Redis)" seed
  row "a middleware adding the two fields alone" headers
done

/usr/bin/python3 - "$workdir/rows" "$seconds" "$connections" "$repeat" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *values = line.rstrip("\n").split("\t")
    rows.setdefault(name, []).append([float(v) for v in values])
print(f"wrk -t1 -c{sys.argv[3]} -d{sys.argv[2]}s, uvicorn 1 worker, medians of {sys.argv[4]} runs")
print("| row | requests/s | p99 ms | event loop thread CPU µs / request | process CPU µs / request |")
print("|---|---:|---:|---:|---:|")
med = {n: [statistics.median(r[i] for r in runs) for i in range(4)] for n, runs in rows.items()}
for name, (rps, p99, loop_us, process_us) in med.items():
    print(f"| {name} | {rps:.0f} | {p99:.2f} | {loop_us:.1f} | {process_us:.1f} |")
without, with_ = med["without middleware"][0], med["with ratekeeper.asgi (Redis)"][0]
print(f"the middleware costs {100 * (1 - with_ / without):.1f} % of the empty endpoint's requests/s ({with_ / without:.3f}x)")
seed = med.get("with the seed's middleware (Redis)")
if seed:
    print(f"the seed's middleware costs {100 * (1 - seed[0] / without):.1f} % ({seed[0] / without:.3f}x)")
PY
