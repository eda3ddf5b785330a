#!/usr/bin/env bash
# Streaming through the reverse proxy with flat memory: `ratekeeper serve` with an upstream
# (a small Python server on loopback: it discards what is uploaded and streams what is asked
# for), then 1 GiB uploaded (PUT with Content-Length, then PUT chunked) and 1 GiB downloaded
# through it with curl, one at a time, with a rule applied to every request. Prints the
# server's resident set (VmRSS) before, after each transfer and its peak (VmHWM), and each
# transfer's throughput.
#
#   bench/proxy_stream.sh [path/to/ratekeeper]
#   SIZE=268435456 bench/proxy_stream.sh      # bytes each way (default 1 GiB)
set -euo pipefail
cd "$(dirname "$0")/.."

binary=${1:-build/ratekeeper}
size=${SIZE:-1073741824}

[ -x "$binary" ] || { echo "no ratekeeper binary at $binary (build target ratekeeper_cli)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is not installed" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is not installed" >&2; exit 1; }

work=$(mktemp -d)
upstream_pid=""
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [ -n "$upstream_pid" ] && kill -TERM "$upstream_pid" 2>/dev/null && wait "$upstream_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

. bench/ports.sh

cat >"$work/upstream.py" <<'PY'
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PIECE = b"x" * (1 << 20)

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_PUT(self):
        received = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                while size > 0:
                    n = len(self.rfile.read(min(size, 1 << 20)))
                    size -= n
                    received += n
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left > 0:
                n = len(self.rfile.read(min(left, 1 << 20)))
                if n == 0:
                    break
                left -= n
                received += n
        body = str(received).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        total = int(self.path.rsplit("/", 1)[1])
        self.send_response(200)
        self.send_header("Content-Length", str(total))
        self.end_headers()
        while total > 0:
            n = min(total, len(PIECE))
            self.wfile.write(PIECE[:n])
            total -= n

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
PY

upstream_port=$(free_port 19000)
python3 "$work/upstream.py" "$upstream_port" &
upstream_pid=$!
port=$(free_port 19300)
admin_port=$(free_port $((port + 1)))
cat >"$work/proxy.yaml" <<YAML
listen: 127.0.0.1:$port
threads: 1
upstream: {url: "http://127.0.0.1:$upstream_port"}
admin: {listen: "127.0.0.1:$admin_port"}
logging: {decisions: {enabled: false}}
rules:
  - name: everything
    limits: [{capacity: 1000000, refill_rate: 1000}]
YAML
"$binary" serve --config "$work/proxy.yaml" --store memory:// >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://127.0.0.1:$admin_port/healthz" && break
  sleep 0.1
done
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://127.0.0.1:$upstream_port/stream/0" && break
  sleep 0.1
done

rss() { awk -v k="$1:" '$1 == k {print $2 " kB"}' "/proc/$server_pid/status"; }
truncate -s "$size" "$work/body"

echo "bytes each way: $size"
echo "server VmRSS before: $(rss VmRSS)"
t=$(curl -s -o "$work/out" -w '%{speed_upload}' -T "$work/body" "http://127.0.0.1:$port/upload")
echo "upload (Content-Length): $(cat "$work/out") bytes at upstream, $((${t%.*} / 1048576)) MiB/s; VmRSS $(rss VmRSS)"
t=$(curl -s -o "$work/out" -w '%{speed_upload}' -T - "http://127.0.0.1:$port/upload" <"$work/body")
echo "upload (chunked): $(cat "$work/out") bytes at upstream, $((${t%.*} / 1048576)) MiB/s; VmRSS $(rss VmRSS)"
t=$(curl -s -o /dev/null -w '%{size_download} %{speed_download}' "http://127.0.0.1:$port/stream/$size")
echo "download: ${t% *} bytes, $(( ${t#* } / 1048576 )) MiB/s; VmRSS $(rss VmRSS)"
echo "server VmHWM (peak): $(rss VmHWM)"
