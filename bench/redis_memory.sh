#!/usr/bin/env bash
# Redis memory per rate-limit key: loads N keys (default 100000) into a fresh redis-server
# on a free loopback port, one layout at a time, and prints the growth of INFO memory
# `used_memory` divided by N, and MEMORY USAGE of one key. Builds nothing: the scripts are
# assembled from lua/*.lua by cmake/EmbedLuaScript.cmake, as the build does.
#
#   bench/redis_memory.sh [--keys N]
#
# Layouts: each algorithm's script after one admitted request of cost 1 (and the sliding
# log after 10), then for comparison the alternatives not chosen (a hash for the windows)
# and the seed's token bucket script (a hash {tokens, last_refill} and EXPIRE 3600).
# Every script call uses an explicit `now` at the start of a window, so that no key expires
# while the keys are loaded and every window holds the same state.
set -euo pipefail

keys=100000
while [[ $# -gt 0 ]]; do
  case $1 in
    --keys) [[ $# -ge 2 ]] || { echo "redis_memory.sh: --keys needs a value" >&2; exit 2; }; keys=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "redis_memory.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The scripts exactly as embedded.
inputs=$(printf '%s|' "$root"/lua/*.lua)
cmake -DOUTPUT="$work/lua_scripts.cpp" "-DINPUTS=${inputs%|}" -P "$root/cmake/EmbedLuaScript.cmake"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=$((20000 + RANDOM % 30000))
until port_free "$port"; do port=$((20000 + RANDOM % 30000)); done
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --logfile "$work/redis.log" &
server_pid=$!
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 100); do cli PING >/dev/null 2>&1 && break; sleep 0.05; done
cli PING >/dev/null

declare -A sha
for name in token_bucket sliding_window_log sliding_window_counter fixed_window multi; do
  sha[$name]=$(cli -x SCRIPT LOAD <"$work/lua/$name.lua")
done
seed_script='
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local requested = tonumber(ARGV[4])

local bucket = redis.call('"'HMGET'"', key, '"'tokens'"', '"'last_refill'"')
local tokens = tonumber(bucket[1]) or capacity
local last_refill = tonumber(bucket[2]) or now

-- Refill tokens based on elapsed time
local elapsed = math.max(0, now - last_refill)
local refilled = elapsed * refill_rate
tokens = math.min(capacity, tokens + refilled)

if tokens < requested then
    -- Not enough tokens — reject
    redis.call('"'HMSET'"', key, '"'tokens'"', tokens, '"'last_refill'"', now)
    redis.call('"'EXPIRE'"', key, 3600)
    return 0
end

-- Consume tokens
tokens = tokens - requested
redis.call('"'HMSET'"', key, '"'tokens'"', tokens, '"'last_refill'"', now)
redis.call('"'EXPIRE'"', key, 3600)
return 1
'
sha[seed]=$(cli SCRIPT LOAD "$seed_script")

# A window start (µs) on every window length used below: windows of 1 h.
hour=3600000000
start=$(( ($(date +%s) * 1000000 / hour) * hour ))

# Writes `repeat` × `keys` commands in RESP to stdout. In an argument, @i is the key index;
# an argument "=now+i" or "=now+j" is the window start plus the key index or the repetition
# (from 0).
resp() {
  local repeat=$1; shift
  LC_ALL=C awk -v n="$keys" -v r="$repeat" -v start="$start" -v args="$(printf '%s\x1f' "$@")" '
    BEGIN {
      m = split(args, expr, "\x1f") - 1
      for (a = 1; a <= m; a++) {
        at[a] = index(expr[a], "@i")
        if (at[a] > 0) { head[a] = substr(expr[a], 1, at[a] - 1); tail[a] = substr(expr[a], at[a] + 2) }
      }
      for (j = 0; j < r; j++) for (i = 0; i < n; i++) {
        out = "*" m "\r\n"
        for (a = 1; a <= m; a++) {
          if (expr[a] == "=now+i") v = sprintf("%.0f", start + i)
          else if (expr[a] == "=now+j") v = sprintf("%.0f", start + j)
          else if (at[a] > 0) v = head[a] i tail[a]
          else v = expr[a]
          out = out "$" length(v) "\r\n" v "\r\n"
        }
        printf "%s", out
      }
    }'
}

used_memory() { cli INFO memory | awk -F: '/^used_memory:/ { sub(/\r/, "", $2); print $2 }'; }

# measure <label> <repeat> <argument expressions...>
measure() {
  local label=$1 repeat=$2; shift 2
  cli FLUSHALL >/dev/null
  cli MEMORY PURGE >/dev/null
  local before after sample
  before=$(used_memory)
  resp "$repeat" "$@" | cli --pipe >"$work/pipe.log" 2>&1 || { cat "$work/pipe.log" >&2; exit 1; }
  grep -q 'errors: 0,' "$work/pipe.log" || { cat "$work/pipe.log" >&2; exit 1; }
  after=$(used_memory)
  local count
  count=$(cli DBSIZE)
  [[ $count -eq $keys ]] || { echo "$label: $count keys instead of $keys" >&2; exit 1; }
  sample=$(cli MEMORY USAGE "ratelimit:{user:7}:api" SAMPLES 0)
  printf '| %-58s | %10.1f | %12s | %s\n' "$label" "$(echo "($after - $before) / $keys" | bc -l)" \
    "$sample" "$(cli TYPE "ratelimit:{user:7}:api") $(cli OBJECT ENCODING "ratelimit:{user:7}:api")"
}

key='ratelimit:{user:@i}:api'
echo "redis $(redis-server --version | awk '{print $3}'), $keys keys, key names like ratelimit:{user:7}:api"
echo
printf '| %-58s | %10s | %12s | %s\n' "layout" "bytes/key" "MEMORY USAGE" "type, encoding"
printf '|%s|%s|%s|%s\n' "$(printf -- '-%.0s' {1..60})" "------------" "--------------" "----------------"
measure "token_bucket (string: tat)" 1 EVALSHA "${sha[token_bucket]}" 1 "$key" 100 60000000 1 "=now+i"
measure "fixed_window (string: start:count)" 1 EVALSHA "${sha[fixed_window]}" 1 "$key" 100 "$hour" 1 "=now+i"
measure "sliding_window_counter (string: start:current:previous)" 1 \
  EVALSHA "${sha[sliding_window_counter]}" 1 "$key" 100 "$hour" 1 "=now+i"
measure "sliding_window_log, 1 entry (zset)" 1 EVALSHA "${sha[sliding_window_log]}" 1 "$key" 100 "$hour" 1 "=now+i"
measure "sliding_window_log, 10 entries (zset)" 10 \
  EVALSHA "${sha[sliding_window_log]}" 1 "$key" 100 "$hour" 1 "=now+j"
measure "not chosen: fixed window as hash {w, c}" 1 EVAL "
redis.call('HSET', KEYS[1], 'w', ARGV[1], 'c', '1')
redis.call('PEXPIRE', KEYS[1], '3600000')" 1 "$key" "=now+j"
measure "not chosen: sliding counter as hash {w, c, p}" 1 EVAL "
redis.call('HSET', KEYS[1], 'w', ARGV[1], 'c', '1', 'p', '0')
redis.call('PEXPIRE', KEYS[1], '3600000')" 1 "$key" "=now+j"
measure "not chosen: sliding log, 10 members \"<time>:<k>\"" 10 EVAL "
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1] .. ':0')
redis.call('PEXPIRE', KEYS[1], '3600000')" 1 "$key" "=now+j"
measure "seed: token bucket hash {tokens, last_refill}" 1 \
  EVALSHA "${sha[seed]}" 1 "$key" 100 10 "$(date +%s).123456" 1
echo
echo "seed's stored hash: $(cli HGETALL 'ratelimit:{user:7}:api' | tr '\n' ' ')"
