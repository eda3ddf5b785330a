#!/usr/bin/env bash
# Installs what is missing, builds the server, starts a local redis-server when no Redis is
# configured or reachable, and serves the demo API with config/ratekeeper.yaml.
#
#   ./scripts/run.sh                         # http://127.0.0.1:8080
#   RATEKEEPER_LISTEN=127.0.0.1:9090 ./scripts/run.sh
#   RATEKEEPER_REDIS_URL=redis://10.0.0.5:6379 ./scripts/run.sh
#
# Ctrl-C stops the server (graceful drain) and the redis-server this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

listen=${RATEKEEPER_LISTEN:-127.0.0.1:8080}
config=${RATEKEEPER_CONFIG:-config/ratekeeper.yaml}

if [ "$(id -u)" -eq 0 ]; then
  ./scripts/deps.sh
elif command -v sudo >/dev/null 2>&1; then
  sudo ./scripts/deps.sh
else
  echo "not root and no sudo: skipping dependency installation (see scripts/deps.sh)" >&2
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRATEKEEPER_TESTS=OFF \
  -DRATEKEEPER_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target ratekeeper_cli

redis_pid=""
server_pid=""
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ -n "$redis_pid" ] && kill -0 "$redis_pid" 2>/dev/null; then
    echo "stopping redis-server (pid $redis_pid)"
    kill -TERM "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if [ -n "${RATEKEEPER_REDIS_URL:-}" ]; then
  redis_url=$RATEKEEPER_REDIS_URL
elif [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null || true)" = "PONG" ]; then
  redis_url=redis://127.0.0.1:6379
else
  redis_port=""
  for p in $(seq 6380 6480); do
    if ! port_in_use "$p"; then redis_port=$p; break; fi
  done
  [ -n "$redis_port" ] || { echo "no free port for redis-server" >&2; exit 1; }
  redis_dir=$(mktemp -d)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$redis_dir" --logfile "$redis_dir/redis.log" &
  redis_pid=$!
  for _ in $(seq 1 100); do
    [ "$(redis-cli -p "$redis_port" ping 2>/dev/null || true)" = "PONG" ] && break
    sleep 0.1
  done
  [ "$(redis-cli -p "$redis_port" ping 2>/dev/null || true)" = "PONG" ] ||
    { echo "redis-server did not start (see $redis_dir/redis.log)" >&2; exit 1; }
  redis_url=redis://127.0.0.1:$redis_port
  echo "started redis-server on 127.0.0.1:$redis_port (pid $redis_pid), stopped on exit"
fi

build/ratekeeper serve --config "$config" --store "$redis_url" --listen "$listen" &
server_pid=$!

host=${listen%:*}
port=${listen##*:}
[ "$host" = "0.0.0.0" ] && host=127.0.0.1
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://$host:$port/healthz" && break
  kill -0 "$server_pid" 2>/dev/null || { wait "$server_pid"; exit $?; }
  sleep 0.1
done

cat <<MSG

ratekeeper is serving on http://$host:$port (store $redis_url). Try:

  curl -i http://$host:$port/api/data
  # 150 requests on one connection against the seed's bucket (100, refilled at 10/s): 429s
  curl -s -o /dev/null -w '%{http_code}\n' "http://$host:$port/api/data?[1-150]" | sort | uniq -c
  # the same with one curl process per request (each may take a while on a loaded machine,
  # during which the bucket refills)
  for i in \$(seq 1 150); do curl -s -o /dev/null -w '%{http_code}\n' http://$host:$port/api/data; done | sort | uniq -c
  curl -s http://$host:$port/metrics | grep ratekeeper_decisions_total

Ctrl-C to stop.
MSG
wait "$server_pid"
