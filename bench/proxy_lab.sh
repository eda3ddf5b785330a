# Sourced by the proxy benchmarks (proxy_wrk.sh, edge_tls.sh, proxy_callgrind.sh): a work
# directory and the processes started in it, all stopped and removed on exit; Redis; the fast
# upstream every proxy is measured in front of (nginx answering `return 200`, one worker).
# Expects $nginx (the nginx binary).

. bench/ports.sh

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits until something listens on port $1, up to $2 tenths of a second (default 100).
wait_port() {
  for _ in $(seq 1 "${2:-100}"); do port_in_use "$1" && return; sleep 0.1; done
  echo "nothing listens on port $1" >&2
  exit 1
}

# nginx with its own prefix: config ($1/nginx.conf), pid, logs and temp files under $1.
start_nginx() {
  local dir=$1
  mkdir -p "$dir/logs"
  "$nginx" -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' &
  pids+=($!)
}

# Sets redis_port: a redis-server without persistence, answering.
start_redis() {
  redis_port=$(free_port 17000)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$work" --logfile "$work/redis.log" &
  pids+=($!)
  wait_port "$redis_port"
}

# Sets upstream_port: nginx answering every request `200 ok`, keep-alive without limit.
start_upstream() {
  upstream_port=$(free_port 17300)
  mkdir -p "$work/upstream"
  cat >"$work/upstream/nginx.conf" <<CONF
worker_processes 1;
error_log logs/error.log warn;
pid logs/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  server {
    listen 127.0.0.1:$upstream_port;
    keepalive_requests 1000000;
    location / { return 200 "ok\n"; }
  }
}
CONF
  start_nginx "$work/upstream"
  wait_port "$upstream_port"
}
