#!/usr/bin/env bash
# The reverse proxy's instructions and heap allocations a request, counted by callgrind:
# numbers that do not move with the machine's load, where CPU time on a shared 2-core machine
# varies by a tenth from run to run. For each binary given (a baseline and a change, side by
# side), one worker thread in front of a fast upstream (nginx answering `return 200`), with
#   1. one rule on every request with Redis limits (all admitted),
#   2. the same rule with leases (`lease: {max: 64, ttl: 1s}`),
#   3. no rules;
# `h2load --h1 -c8` sends 400 requests to warm up, then 4,000 counted ones (the counters are
# zeroed in between). Prints instructions and mallocs a request, and the limiter path's
# instructions (each limited row minus the row without rules).
#
#   bench/proxy_callgrind.sh [path/to/ratekeeper ...]
#   REQUESTS=4000 bench/proxy_callgrind.sh /tmp/baseline/ratekeeper build/ratekeeper
set -euo pipefail
cd "$(dirname "$0")/.."

binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=(build/ratekeeper)
requests=${REQUESTS:-4000}
nginx=${NGINX:-/usr/sbin/nginx}
limits="limits: [{capacity: 1000000000, refill_rate: 1000000}]"

for tool in valgrind callgrind_control h2load redis-server python3; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (scripts/deps.sh)" >&2; exit 1; }
done
[ -x "$nginx" ] || { echo "nginx is not installed (scripts/deps.sh)" >&2; exit 1; }
for b in "${binaries[@]}"; do
  [ -x "$b" ] || { echo "no ratekeeper binary at $b (build target ratekeeper_cli)" >&2; exit 1; }
done

. bench/proxy_lab.sh
start_redis
start_upstream

# Calls to malloc in a callgrind dump, per request.
mallocs() {
  python3 - "$1" "$requests" <<'PY'
import re, sys
names, callee, total = {}, None, 0
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
    if m:
        if m.group(3):
            names[m.group(2)] = m.group(3)
        if m.group(1) == "cfn":
            callee = names.get(m.group(2))
        continue
    m = re.match(r"^calls=(\d+)", line)
    if m and callee == "malloc":
        total += int(m.group(1))
print(f"{total / int(sys.argv[2]):.1f}")
PY
}

# One binary, one rule set: prints "instructions mallocs" a request.
count() {  # $1: binary, $2: rules yaml, $3: label
  local dir="$work/$3" port admin pid dump
  mkdir -p "$dir"
  port=$(free_port 18000)
  admin=$(free_port $((port + 1)))
  cat >"$dir/rk.yaml" <<YAML
logging: {level: warn, decisions: {enabled: false}}
listen: 127.0.0.1:$port
threads: 1
store: {url: "redis://127.0.0.1:$redis_port", command_timeout: 2s}
upstream: {url: "http://127.0.0.1:$upstream_port"}
admin: {listen: 127.0.0.1:$admin}
$2
YAML
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$1" serve --config "$dir/rk.yaml" \
    >"$dir/rk.log" 2>&1 &
  pid=$!
  wait_port "$port" 300  # callgrind starts it slowly
  h2load --h1 -n 400 -c 8 "http://127.0.0.1:$port/api/data" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  h2load --h1 -n "$requests" -c 8 "http://127.0.0.1:$port/api/data" >"$dir/h2load.txt"
  grep -q "status codes: $requests 2xx" "$dir/h2load.txt" || {
    echo "not every request answered 2xx:" >&2
    cat "$dir/h2load.txt" >&2
    exit 1
  }
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill -TERM "$pid"
  wait "$pid" || true
  dump=$(ls "$dir"/cg.out.* | head -1)
  echo "$(callgrind_annotate "$dump" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}' |
    awk -v n="$requests" '{printf "%.0f", $1 / n}') $(mallocs "$dump")"
}

row() { printf '%-28s %14s %10s %16s\n' "$@"; }
echo "callgrind, h2load --h1 -c8, $requests requests, one worker thread, upstream nginx return 200"
for b in "${binaries[@]}"; do
  echo
  echo "$b"
  row "" "instructions" "mallocs" "limiter path"
  read -r none_i none_m < <(count "$b" "rules: []" none)
  read -r lim_i lim_m < <(count "$b" "rules: [{name: all, $limits}]" limited)
  read -r lease_i lease_m < <(count "$b" "rules: [{name: all, $limits, lease: {max: 64, ttl: 1s}}]" leased)
  row "Redis limits" "$lim_i" "$lim_m" "$((lim_i - none_i))"
  row "Redis limits, leases" "$lease_i" "$lease_m" "$((lease_i - none_i))"
  row "no rules" "$none_i" "$none_m" ""
done
