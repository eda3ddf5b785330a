"""ratekeeper at the edge, facing clients alone, run for real: TLS listeners (curl, openssl
s_client), mutual TLS, certificates re-read on reload while connections stay open, https
upstreams, WebSocket upgrades relayed both ways (python3-websockets), each process on a free
loopback port.

    python3 tests/edge/edge_test.py --ratekeeper build/ratekeeper
"""

import argparse
import asyncio
import http.client
import http.server
import json
import logging
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import websockets

# The echo upstream's connections closed by the proxy (the idle tunnel) are expected.
logging.getLogger("websockets").setLevel(logging.CRITICAL)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RATEKEEPER = os.path.join(ROOT, "build", "ratekeeper")


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from ports import free_port, free_ports  # noqa: E402


def run(argv, stdin=b"", timeout=30):
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)


class Certs:
    """A CA, a CA nobody trusts, server certificates for localhost / 127.0.0.1 (a first one and
    a renewal of it, told apart by their CN), and client certificates signed by each CA."""

    def __init__(self, directory):
        self.dir = directory
        self.ca = self._ca("ca")
        self.other_ca = self._ca("other-ca")
        self.server = self._leaf("server", "ca", "first", "DNS:localhost,IP:127.0.0.1")
        self.renewed = self._leaf("renewed", "ca", "renewed", "DNS:localhost,IP:127.0.0.1")
        self.client = self._leaf("client", "ca", "client", None)
        self.stranger = self._leaf("stranger", "other-ca", "stranger", None)

    def path(self, name):
        return os.path.join(self.dir, name)

    def _openssl(self, *args):
        r = run(["openssl", *args])
        if r.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)}: {r.stderr.decode()}")

    def _key(self, name):
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                      "-out", self.path(name + ".key"))

    def _ca(self, name):
        self._key(name)
        self._openssl("req", "-x509", "-new", "-key", self.path(name + ".key"), "-days", "2",
                      "-subj", f"/CN={name}", "-out", self.path(name + ".crt"))
        return self.path(name + ".crt")

    def _leaf(self, name, ca, cn, san):
        self._key(name)
        self._openssl("req", "-new", "-key", self.path(name + ".key"), "-subj", f"/CN={cn}",
                      "-out", self.path(name + ".csr"))
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            f.write(f"subjectAltName={san}\n" if san else "extendedKeyUsage=clientAuth\n")
        self._openssl("x509", "-req", "-in", self.path(name + ".csr"), "-CA", self.path(ca + ".crt"),
                      "-CAkey", self.path(ca + ".key"), "-CAcreateserial", "-days", "2",
                      "-extfile", ext, "-out", self.path(name + ".crt"))
        return self.path(name + ".crt"), self.path(name + ".key")


class Ratekeeper:
    """`ratekeeper serve` with a configuration written to a file; stopped by stop()."""

    def __init__(self, directory, yaml):
        self.dir = directory
        self.config = os.path.join(directory, f"ratekeeper-{free_port()}.yaml")
        with open(self.config, "w") as f:
            f.write(yaml)
        self.err_path = self.config + ".err"
        self.out_path = self.config + ".out"
        with open(self.err_path, "wb") as err, open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen([RATEKEEPER, "serve", "--config", self.config], stdout=out, stderr=err)
        end = time.monotonic() + 20
        while "listening on" not in self.log():
            if self.proc.poll() is not None:
                raise RuntimeError(f"ratekeeper exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > end:
                self.stop()  # no cleanup was registered for it yet
                raise RuntimeError(f"ratekeeper did not listen:\n{self.log()}")
            time.sleep(0.05)
        if "admin endpoints on" in yaml or "upstream:" in yaml:
            while "admin endpoints on" not in self.log():
                time.sleep(0.05)

    def log(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def out(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode(errors="replace")

    def rewrite(self, yaml):
        with open(self.config, "w") as f:
            f.write(yaml)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def metric(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def scraped(port, ready):
    """The admin listener's /metrics once `ready(text)` holds (or after 10 s): a request's
    latency is recorded once its response is written, which its client may see first."""
    end = time.monotonic() + 10
    while True:
        _, text = plain_get(port, "/metrics")
        if ready(text) or time.monotonic() > end:
            return text
        time.sleep(0.05)


def plain_get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


class Echo(http.server.BaseHTTPRequestHandler):
    """An upstream that answers every request with what it received, as JSON."""

    protocol_version = "HTTP/1.1"

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy gave up on a slow answer (/sleep/, /stall/)

    def do_GET(self):
        if self.path.startswith("/sleep/"):  # the answer after this many milliseconds
            time.sleep(int(self.path[len("/sleep/"):]) / 1000)
        if self.path.startswith("/stall/"):  # the head and 5 of 10 bytes, the rest after this many ms
            self.send_response(200)
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.write(b"01234")
            self.wfile.flush()
            time.sleep(int(self.path[len("/stall/"):]) / 1000)
            try:
                self.wfile.write(b"56789")
            except OSError:
                pass
            return
        if self.path.startswith("/drip/"):  # 6 bytes, one every this many milliseconds
            self.send_response(200)
            self.send_header("Content-Length", "6")
            self.end_headers()
            for byte in b"abcdef":
                time.sleep(int(self.path[len("/drip/"):]) / 1000)
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            return
        if self.path.startswith("/bytes/"):  # N bytes of a pattern
            n = int(self.path[len("/bytes/"):])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = bytes(range(256)) * 256
            while n > 0:
                self.wfile.write(block[:min(n, len(block))])
                n -= min(n, len(block))
            return
        body = json.dumps({"path": self.path, "headers": dict(self.headers.items()),
                           "hosts": self.headers.get_all("Host") or [],
                           "body_bytes": len(self.rfile.read(int(self.headers.get("Content-Length", 0))))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


class HttpsEcho:
    """Echo over TLS with `cert`, on a thread of its own."""

    def __init__(self, cert):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*cert)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class WebSocketEcho:
    """A WebSocket server (python3-websockets) that sends back every message, on a thread with
    its own event loop."""

    def __init__(self):
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.paths = []
        ready = threading.Event()

        async def echo(ws, path):
            self.paths.append((path, {k.lower(): v for k, v in ws.request_headers.raw_items()}))
            async for message in ws:
                await ws.send(message)

        async def main():
            self.stop_future = self.loop.create_future()
            async with websockets.serve(echo, "127.0.0.1", self.port):
                ready.set()
                await self.stop_future

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),), daemon=True)
        self.thread.start()
        ready.wait(10)

    def stop(self):
        self.loop.call_soon_threadsafe(self.stop_future.set_result, None)
        self.thread.join(10)
        self.loop.close()


class Edge(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ratekeeper-edge-")
        cls.certs = Certs(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.stops = []

    def tearDown(self):
        for stop in reversed(self.stops):
            stop()

    def start(self, yaml):
        rk = Ratekeeper(self.tmp, yaml)
        self.stops.append(rk.stop)
        return rk

    def tls_section(self, cert=None, extra=""):
        cert = cert or self.certs.server
        return f"tls:\n  cert_file: {cert[0]}\n  key_file: {cert[1]}\n{extra}"

    def curl(self, url, *args):
        """curl's status code and body (status 0 when the connection failed)."""
        r = run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--cacert", self.certs.ca, *args, url])
        body, _, code = r.stdout.decode(errors="replace").rpartition("\n")
        return int(code or 0), body

    def s_client(self, port, *args):
        return run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", self.certs.ca,
                    *args], stdin=b"Q\n")

    # ---- TLS listeners -------------------------------------------------------------------------

    def test_tls_listener_serves_the_routes_and_limits_them(self):
        port = free_port()
        rk = self.start(f"""listen: 127.0.0.1:{port}
demo_api: true
{self.tls_section()}rules:
  - name: api
    match: {{path: /api/data}}
    limits:
      - {{capacity: 2, refill_rate: 0.001}}
""")
        self.assertIn("(TLS)", rk.log())
        statuses = [self.curl(f"https://localhost:{port}/api/data")[0] for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 429])
        r = run(["curl", "-s", "-i", "--cacert", self.certs.ca, f"https://127.0.0.1:{port}/api/data"])
        self.assertIn(b"Retry-After:", r.stdout)
        # A client speaking plain HTTP to the TLS port gets no answer, and the failed handshake
        # is counted and logged with the reason.
        code, _ = self.curl(f"http://127.0.0.1:{port}/api/data")
        self.assertEqual(code, 0)
        code, text = self.curl(f"https://127.0.0.1:{port}/metrics")
        self.assertEqual(code, 200)
        self.assertEqual(metric(text, "ratekeeper_http_tls_handshake_failures_total"), 1)
        self.assertIn("TLS handshake with 127.0.0.1", rk.log())
        self.assertIn("failed: http request", rk.log())

    def test_only_tls_1_2_and_1_3_and_alpn_http_1_1(self):
        port = free_port()
        self.start(f"listen: 127.0.0.1:{port}\ndemo_api: true\n{self.tls_section()}")
        self.assertNotEqual(self.s_client(port, "-tls1_1").returncode, 0)
        tls12 = self.s_client(port, "-tls1_2")
        self.assertEqual(tls12.returncode, 0, tls12.stderr)
        self.assertIn(b"ECDHE", tls12.stdout)  # forward secrecy
        alpn = self.s_client(port, "-alpn", "h2,http/1.1")
        self.assertIn(b"ALPN protocol: http/1.1", alpn.stdout)

        port13 = free_port()
        only13 = self.tls_section(extra='  min_version: "1.3"\n')
        self.start(f"listen: 127.0.0.1:{port13}\ndemo_api: true\n{only13}")
        self.assertNotEqual(self.s_client(port13, "-tls1_2").returncode, 0)
        self.assertEqual(self.s_client(port13, "-tls1_3").returncode, 0)

    def test_mutual_tls_admits_only_clients_with_a_certificate_of_the_ca(self):
        port = free_port()
        mutual = self.tls_section(extra=f"  client_ca_file: {self.certs.ca}\n")
        self.start(f"listen: 127.0.0.1:{port}\ndemo_api: true\n{mutual}")
        url = f"https://localhost:{port}/api/data"
        self.assertEqual(self.curl(url)[0], 0)
        self.assertEqual(self.curl(url, "--cert", self.certs.stranger[0], "--key", self.certs.stranger[1])[0], 0)
        self.assertEqual(self.curl(url, "--cert", self.certs.client[0], "--key", self.certs.client[1])[0], 200)

    def test_a_reload_serves_the_new_certificate_and_keeps_connections_open(self):
        port = free_port()
        cert = os.path.join(self.tmp, "live.crt")
        key = os.path.join(self.tmp, "live.key")
        shutil.copy(self.certs.server[0], cert)
        shutil.copy(self.certs.server[1], key)
        yaml = f"listen: 127.0.0.1:{port}\ndemo_api: true\n{self.tls_section((cert, key))}"
        self.start(yaml)
        context = ssl.create_default_context(cafile=self.certs.ca)

        def peer_cn(conn):
            subject = dict(x[0] for x in conn.sock.getpeercert()["subject"])
            return subject["commonName"]

        kept = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
        kept.request("GET", "/api/data")
        self.assertEqual(kept.getresponse().read() != b"", True)
        self.assertEqual(peer_cn(kept), "first")

        # Renewed files in place (as certbot leaves them), then a reload.
        shutil.copy(self.certs.renewed[0], cert)
        shutil.copy(self.certs.renewed[1], key)
        code, body = self.curl(f"https://localhost:{port}/admin/reload", "-X", "POST")
        self.assertEqual(code, 200, body)

        kept.request("GET", "/api/data")
        response = kept.getresponse()
        response.read()
        self.assertEqual(response.status, 200)
        self.assertEqual(peer_cn(kept), "first")  # the same connection, on
        fresh = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
        fresh.request("GET", "/api/data")
        fresh.getresponse().read()
        self.assertEqual(peer_cn(fresh), "renewed")

        # A broken certificate file is refused by the reload, naming the field; the last one
        # read goes on serving.
        with open(cert, "w") as f:
            f.write("not a certificate\n")
        code, body = self.curl(f"https://localhost:{port}/admin/reload", "-X", "POST")
        self.assertEqual(code, 422, body)
        self.assertIn("tls", json.loads(body)["error"])
        self.assertIn("cert_file", json.loads(body)["error"])
        again = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
        again.request("GET", "/api/data")
        again.getresponse().read()
        self.assertEqual(peer_cn(again), "renewed")
        for c in (kept, fresh, again):
            c.close()

    def test_admin_listener_speaks_tls_of_its_own(self):
        upstream = HttpsEcho(self.certs.server)
        self.stops.append(upstream.stop)
        port, admin = free_ports(2)
        self.start(f"""listen: 127.0.0.1:{port}
upstream: {{url: "https://localhost:{upstream.port}", tls: {{ca_file: {self.certs.ca}}}}}
admin:
  listen: 127.0.0.1:{admin}
  tls: {{cert_file: {self.certs.server[0]}, key_file: {self.certs.server[1]}, client_ca_file: {self.certs.ca}}}
rules: []
""")
        self.assertEqual(plain_get(port, "/x")[0], 200)  # the public listener: plain
        self.assertEqual(self.curl(f"https://localhost:{admin}/healthz")[0], 0)  # no client certificate
        code, _ = self.curl(f"https://localhost:{admin}/healthz", "--cert", self.certs.client[0],
                            "--key", self.certs.client[1])
        self.assertEqual(code, 200)

    def test_invalid_tls_configuration_is_refused_naming_the_field(self):
        bad = os.path.join(self.tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write(f"listen: 127.0.0.1:0\ntls:\n  cert_file: {self.certs.server[0]}\n"
                    f"  key_file: {self.certs.client[1]}\n")
        r = run([RATEKEEPER, "check-config", bad])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"tls key_file", r.stderr)
        self.assertIn(b"mismatch", r.stderr)
        good = os.path.join(self.tmp, "good.yaml")
        with open(good, "w") as f:
            f.write(f"listen: 127.0.0.1:0\n{self.tls_section()}upstream: {{url: 'https://app.internal'}}\n"
                    f"admin: {{listen: 127.0.0.1:0, tls: {{cert_file: {self.certs.server[0]}, "
                    f"key_file: {self.certs.server[1]}}}}}\n")
        r = run([RATEKEEPER, "check-config", good])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"listen: 127.0.0.1:0 (TLS), proxying to https://app.internal:443", r.stdout)
        self.assertIn(b"admin: 127.0.0.1:0 (TLS)", r.stdout)

    # ---- https upstreams ----------------------------------------------------------------------

    def proxy_to(self, upstream_url, upstream_extra="", listener_tls=""):
        port, admin = free_ports(2)
        rk = self.start(f"""listen: 127.0.0.1:{port}
{listener_tls}upstream:
  url: "{upstream_url}"
{upstream_extra}admin: {{listen: 127.0.0.1:{admin}}}
rules:
  - name: ws
    match: {{path: /ws}}
    limits:
      - {{capacity: 2, refill_rate: 0.001}}
""")
        return rk, port, admin

    def test_https_upstream_is_verified(self):
        upstream = HttpsEcho(self.certs.server)
        self.stops.append(upstream.stop)
        _, port, admin = self.proxy_to(f"https://localhost:{upstream.port}",
                                       f"  tls: {{ca_file: {self.certs.ca}}}\n",
                                       self.tls_section())
        code, body = self.curl(f"https://localhost:{port}/hello")
        self.assertEqual(code, 200, body)
        seen = json.loads(body)
        self.assertEqual(seen["path"], "/hello")
        self.assertEqual(seen["headers"]["X-Forwarded-Proto"], "https")

        # The same upstream under a CA that did not sign it: 502, logged with the reason.
        rk, port, admin = self.proxy_to(f"https://localhost:{upstream.port}",
                                        f"  tls: {{ca_file: {self.certs.other_ca}}}\n")
        self.assertEqual(plain_get(port, "/hello")[0], 502)
        self.assertIn("certificate verify failed", rk.log())
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, "ratekeeper_proxy_upstream_tls_failures_total"), 1)

        # And under a name its certificate does not carry.
        rk, port, _ = self.proxy_to(f"https://localhost:{upstream.port}",
                                    f"  tls: {{ca_file: {self.certs.ca}, server_name: app.example}}\n")
        self.assertEqual(plain_get(port, "/hello")[0], 502)
        self.assertIn("certificate verify failed", rk.log())

    def test_an_https_upstream_that_never_answers_the_handshake_is_a_504_after_connect_timeout(self):
        # An upstream that accepts connections and says nothing: the handshake is bounded by
        # upstream.connect_timeout, as the connection is, and answered as a connection timing out.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        self.stops.append(silent.close)
        rk, port, _ = self.proxy_to(f"https://localhost:{silent.getsockname()[1]}",
                                    f"  connect_timeout: 300ms\n  tls: {{ca_file: {self.certs.ca}}}\n")
        began = time.monotonic()
        self.assertEqual(plain_get(port, "/hello")[0], 504)
        self.assertLess(time.monotonic() - began, 8)

    def test_a_client_that_never_finishes_its_handshake_is_closed_after_read_timeout(self):
        # Both TLS listeners, the proxy's and the server's: a client that connects and sends
        # half a ClientHello holds its connection for http.read_timeout, not longer.
        proxy_port = free_port()
        self.start(f"listen: 127.0.0.1:{proxy_port}\nhttp: {{read_timeout: 300ms}}\n"
                   f"upstream: {{url: 'http://127.0.0.1:9'}}\n{self.tls_section()}")
        server_port = free_port()
        self.start(f"listen: 127.0.0.1:{server_port}\nhttp: {{read_timeout: 300ms}}\ndemo_api: true\n"
                   f"{self.tls_section()}")
        for port in (proxy_port, server_port):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
                began = time.monotonic()
                try:
                    rest = s.recv(4096)
                except (ConnectionResetError, socket.timeout):
                    rest = None
                self.assertEqual(rest, b"", f"port {port}: not closed within 10 s")
                self.assertLess(time.monotonic() - began, 8, f"port {port}")

    # ---- WebSocket -----------------------------------------------------------------------------

    def test_websocket_is_relayed_both_ways_and_limited_as_a_request(self):
        echo = WebSocketEcho()
        self.stops.append(echo.stop)
        rk, port, admin = self.proxy_to(f"http://127.0.0.1:{echo.port}")

        async def talk():
            async with websockets.connect(f"ws://127.0.0.1:{port}/ws") as ws:
                replies = []
                for text in ("hello", "x" * 200_000):
                    await ws.send(text)
                    replies.append(await ws.recv())
                return replies

        for _ in range(2):
            replies = asyncio.run(talk())
            self.assertEqual(replies, ["hello", "x" * 200_000])
        with self.assertRaises(websockets.exceptions.InvalidStatusCode) as refused:
            asyncio.run(talk())
        self.assertEqual(refused.exception.status_code, 429)
        self.assertEqual(len(echo.paths), 2)
        self.assertEqual(echo.paths[0][1]["x-forwarded-for"], "127.0.0.1")
        # A tunnel is counted closed once both its sides are, which the client may see first.
        text = scraped(admin, lambda text: metric(text, "ratekeeper_proxy_tunnels_open") == 0)
        self.assertEqual(metric(text, "ratekeeper_proxy_upgrades_total"), 2)
        self.assertEqual(metric(text, "ratekeeper_proxy_tunnels_open"), 0)
        # Both ended by a side closing (after the close handshake, the server closes first).
        closed = {reason: metric(text, f'ratekeeper_proxy_tunnels_closed_total{{reason="{reason}"}}')
                  for reason in ("client", "upstream", "idle", "max_duration", "error", "shutdown")}
        self.assertEqual(closed["client"] + closed["upstream"], 2, closed)
        self.assertEqual(closed["idle"] + closed["max_duration"] + closed["error"] + closed["shutdown"], 0, closed)

    def test_websocket_over_a_tls_listener(self):
        echo = WebSocketEcho()
        self.stops.append(echo.stop)
        _, port, _ = self.proxy_to(f"http://127.0.0.1:{echo.port}", listener_tls=self.tls_section())
        context = ssl.create_default_context(cafile=self.certs.ca)

        async def talk():
            async with websockets.connect(f"wss://localhost:{port}/chat", ssl=context) as ws:
                await ws.send("over tls")
                return await ws.recv()

        self.assertEqual(asyncio.run(talk()), "over tls")
        self.assertEqual(echo.paths[0][1]["x-forwarded-proto"], "https")

    def test_an_idle_tunnel_is_closed(self):
        echo = WebSocketEcho()
        self.stops.append(echo.stop)
        rk, port, admin = self.proxy_to(f"http://127.0.0.1:{echo.port}", "  tunnel_idle_timeout: 1s\n")

        async def idle():
            async with websockets.connect(f"ws://127.0.0.1:{port}/chat", ping_interval=None) as ws:
                await ws.send("once")
                await ws.recv()
                try:
                    await asyncio.wait_for(ws.recv(), timeout=20)
                except websockets.exceptions.ConnectionClosed:
                    return "closed"
                return "message"

        self.assertEqual(asyncio.run(idle()), "closed")
        text = scraped(admin, lambda text: metric(text, "ratekeeper_proxy_tunnels_open") == 0)
        self.assertEqual(metric(text, "ratekeeper_proxy_tunnels_open"), 0)
        self.assertEqual(metric(text, 'ratekeeper_proxy_tunnels_closed_total{reason="idle"}'), 1)
        self.assertRegex(rk.log(), r"tunnel of 127\.0\.0\.1 closed after \d+s: "
                                   r"no byte either way for upstream\.tunnel_idle_timeout")

    def test_an_upgrade_to_h2c_is_never_relayed(self):
        # Relayed, an h2c upgrade would carry requests the rules never see (h2c smuggling): only
        # the protocols in upstream.upgrades (WebSocket) are, and HTTP2-Settings never is.
        upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        self.stops.append(lambda: (upstream.shutdown(), upstream.server_close()))
        _, port, admin = self.proxy_to(f"http://127.0.0.1:{upstream.server_address[1]}")
        for offered in ("h2c", "websocket, h2c", "H2C"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("GET", "/h2c", headers={"Connection": "Upgrade, HTTP2-Settings", "Upgrade": offered,
                                                     "HTTP2-Settings": "AAMAAABkAAQAoAAAAAIAAAAA"})
                r = conn.getresponse()
                self.assertEqual(r.status, 200, offered)
                seen = {k.lower(): v for k, v in json.loads(r.read())["headers"].items()}
            finally:
                conn.close()
            self.assertNotIn("upgrade", seen, offered)
            self.assertNotIn("http2-settings", seen, offered)
            self.assertNotIn("upgrade", seen.get("connection", "").lower(), offered)
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, "ratekeeper_proxy_upgrades_total"), 0)

    def test_upgrades_off_sends_a_plain_request(self):
        echo = WebSocketEcho()
        self.stops.append(echo.stop)
        _, port, admin = self.proxy_to(f"http://127.0.0.1:{echo.port}", "  upgrades: false\n")

        async def talk():
            async with websockets.connect(f"ws://127.0.0.1:{port}/chat"):
                pass

        with self.assertRaises(websockets.exceptions.InvalidStatusCode) as refused:
            asyncio.run(talk())
        self.assertNotEqual(refused.exception.status_code, 101)
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, "ratekeeper_proxy_upgrades_total"), 0)


class Operations(unittest.TestCase):
    """The operator's kit: the access log, the latency histograms, the process's metrics."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ratekeeper-ops-")
        self.stops = []
        self.upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
        threading.Thread(target=self.upstream.serve_forever, daemon=True).start()
        self.stops.append(lambda: (self.upstream.shutdown(), self.upstream.server_close()))

    def tearDown(self):
        for stop in reversed(self.stops):
            stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def proxy(self, access_log):
        self.port, self.admin = free_ports(2)
        self.yaml = f"""listen: 127.0.0.1:{self.port}
upstream: {{url: "http://127.0.0.1:{self.upstream.server_address[1]}"}}
admin: {{listen: 127.0.0.1:{self.admin}}}
{access_log}rules:
  - name: api
    match: {{path: /api/data}}
    limits:
      - {{capacity: 2, refill_rate: 0.001}}
"""
        rk = Ratekeeper(self.tmp, self.yaml)
        self.stops.append(rk.stop)
        return rk

    def lines(self, path, at_least):
        """The access log's lines once there are at least `at_least` (written twice a second)."""
        end = time.monotonic() + 10
        while True:
            text = ""
            if os.path.exists(path):
                with open(path) as f:
                    text = f.read()
            lines = [json.loads(line) for line in text.splitlines()]
            if len(lines) >= at_least or time.monotonic() > end:
                return lines
            time.sleep(0.1)

    def test_access_log_has_one_json_line_per_request(self):
        log = os.path.join(self.tmp, "access.log")
        self.proxy(f"access_log: {{path: {log}}}\n")
        statuses = [plain_get(self.port, "/api/data")[0] for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 429])
        self.assertEqual(plain_get(self.port, "/other?q=%C3%A9")[0], 200)
        lines = self.lines(log, 4)
        self.assertEqual(len(lines), 4, lines)
        first, _, limited, other = lines
        self.assertRegex(first["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$")
        self.assertEqual((first["client"], first["method"], first["path"]), ("127.0.0.1", "GET", "/api/data"))
        self.assertEqual((first["status"], first["rule"], first["outcome"]), (200, "api", "admitted"))
        self.assertIsNotNone(first["upstream_ms"])
        self.assertGreaterEqual(first["duration_ms"], first["upstream_ms"])
        self.assertGreater(first["bytes"], 0)
        self.assertEqual((limited["status"], limited["rule"], limited["outcome"]), (429, "api", "rejected"))
        self.assertIsNone(limited["upstream_ms"])
        self.assertEqual((other["path"], other["rule"], other["outcome"]), ("/other?q=%C3%A9", None, "unmatched"))

    def test_access_log_is_rate_bounded_and_says_how_many_lines_went(self):
        log = os.path.join(self.tmp, "access.log")
        self.proxy(f"access_log: {{path: {log}, max_lines_per_second: 5}}\n")
        for _ in range(40):
            plain_get(self.port, "/other")
        text = scraped(self.admin, lambda text: (metric(text, 'ratekeeper_access_log_lines_total{result="written"}') or 0)
                       + (metric(text, 'ratekeeper_access_log_lines_total{result="dropped"}') or 0) >= 40)
        written = metric(text, 'ratekeeper_access_log_lines_total{result="written"}')
        dropped = metric(text, 'ratekeeper_access_log_lines_total{result="dropped"}')
        self.assertEqual(written + dropped, 40)
        self.assertGreater(dropped, 0)
        self.assertLess(written, 40)
        time.sleep(1.2)  # a token again: the next line says how many were dropped before it
        plain_get(self.port, "/other")
        lines = self.lines(log, int(written) + 1)
        self.assertTrue(any(line.get("dropped", 0) > 0 for line in lines), lines[-3:])

    def test_a_reload_reopens_the_access_log(self):
        log = os.path.join(self.tmp, "access.log")
        rk = self.proxy(f"access_log: {{path: {log}}}\n")
        plain_get(self.port, "/before")
        self.assertEqual(len(self.lines(log, 1)), 1)
        os.rename(log, log + ".1")  # rotated away
        r = http.client.HTTPConnection("127.0.0.1", self.admin, timeout=10)
        r.request("POST", "/admin/reload")
        self.assertEqual(r.getresponse().status, 200)
        plain_get(self.port, "/after")
        paths = [line["path"] for line in self.lines(log, 2)]
        # The new file has what came after the reload (its own request included), nothing before.
        self.assertIn("/after", paths, rk.log())
        self.assertNotIn("/before", paths)

    def test_metrics_have_latency_histograms_and_the_process(self):
        self.proxy("")
        for _ in range(3):
            plain_get(self.port, "/api/data")
        text = scraped(self.admin, lambda text: (
            metric(text, 'ratekeeper_http_request_duration_seconds_count{rule="api",outcome="rejected"}'),
            metric(text, 'ratekeeper_http_request_duration_seconds_count{rule="api",outcome="admitted"}'),
            metric(text, 'ratekeeper_proxy_upstream_duration_seconds_count{rule="api"}')) == (1, 2, 2))
        self.assertEqual(metric(text, 'ratekeeper_http_request_duration_seconds_count{rule="api",outcome="admitted"}'), 2)
        self.assertEqual(metric(text, 'ratekeeper_http_request_duration_seconds_count{rule="api",outcome="rejected"}'), 1)
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_duration_seconds_count{rule="api"}'), 2)
        self.assertEqual(
            metric(text, 'ratekeeper_http_request_duration_seconds_bucket{rule="api",outcome="admitted",le="+Inf"}'), 2)
        self.assertGreater(metric(text, "process_cpu_seconds_total"), 0)
        self.assertGreater(metric(text, "process_resident_memory_bytes"), 1e6)
        self.assertGreater(metric(text, "process_open_fds"), 3)
        self.assertAlmostEqual(metric(text, "process_start_time_seconds"), time.time(), delta=120)

    def test_the_servers_own_routes_are_logged(self):
        port = free_port()
        rk = Ratekeeper(self.tmp, f"""listen: 127.0.0.1:{port}
demo_api: true
access_log: {{path: stdout}}
rules:
  - name: api
    match: {{path: /api/data}}
    limits:
      - {{capacity: 1, refill_rate: 0.001}}
""")
        self.stops.append(rk.stop)
        self.assertEqual([plain_get(port, "/api/data")[0] for _ in range(2)], [200, 429])
        rk.stop()  # stdout is written out at exit
        lines = [json.loads(line) for line in rk.out().splitlines() if line.startswith('{"time"')]
        self.assertEqual([(line["status"], line["outcome"]) for line in lines], [(200, "admitted"), (429, "rejected")])


# ---- HTTP/2 frames, written and read by hand (RFC 9113 4.1) -------------------------------------

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_get(path="/", extra=b""):
    """A GET's header block: :method GET, :scheme http (static table), :path and :authority as
    literals without indexing (RFC 7541 6.2.2), then `extra`."""
    def literal(index, value):
        assert len(value) < 127
        return bytes([index, len(value)]) + value
    return b"\x82\x86" + literal(4, path.encode()) + literal(1, b"localhost") + extra


def h2_frames(sock, timeout=10.0):
    """Every frame the server sends until it closes the connection (or the timeout)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    frames = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        if len(data) < 9 + length:
            break
        frames.append((data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF, data[9:9 + length]))
        data = data[9 + length:]
    return frames


class Http2(unittest.TestCase):
    """HTTP/2 to clients on the proxy: h2 by ALPN over TLS and h2c with prior knowledge (curl,
    h2load), each stream a request to the rules; the known denial-of-service classes of HTTP/2
    bounded, each by a client written for it."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ratekeeper-h2-")
        cls.certs = Certs(cls.tmp)
        cls.upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
        threading.Thread(target=cls.upstream.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.upstream.shutdown()
        cls.upstream.server_close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def proxy(self, tls=False, capacity=5, http="{max_body_bytes: 1048576}", upstream="", threads=None):
        port, admin = free_ports(2)
        section = f"tls: {{cert_file: {self.certs.server[0]}, key_file: {self.certs.server[1]}}}\n" if tls else ""
        section += f"threads: {threads}\n" if threads else ""
        rk = Ratekeeper(self.tmp, f"""listen: 127.0.0.1:{port}
upstream: {{url: "http://127.0.0.1:{self.upstream.server_address[1]}"{upstream}}}
admin: {{listen: 127.0.0.1:{admin}}}
http: {http}
{section}rules:
  - name: api
    match: {{path: /api/data}}
    limits:
      - {{capacity: {capacity}, refill_rate: 0.001}}
""")
        self.addCleanup(rk.stop)
        return rk, port, admin

    def curl(self, url, *args):
        r = run(["curl", "-s", "-o", "-", "-w", "\n%{http_code} %{http_version}", "--cacert", self.certs.ca, *args, url])
        body, _, tail = r.stdout.decode(errors="replace").rpartition("\n")
        code, _, version = tail.partition(" ")
        return int(code or 0), version, body

    def h2load(self, url, n=20, streams=5):
        r = run(["h2load", "-n", str(n), "-c", "1", "-m", str(streams), url], timeout=60)
        text = r.stdout.decode()
        for line in text.splitlines():
            if line.startswith("status codes:"):
                parts = line.split()
                return int(parts[2]), int(parts[6])  # 2xx, 4xx
        self.fail(text + r.stderr.decode())

    def test_h2_by_alpn_over_tls_each_stream_a_request(self):
        _, port, admin = self.proxy(tls=True)
        code, version, body = self.curl(f"https://localhost:{port}/hello", "--http2")
        self.assertEqual((code, version), (200, "2"))
        self.assertEqual(json.loads(body)["headers"]["X-Forwarded-Proto"], "https")
        # 20 requests as streams of one connection, 5 at a time: the limit (capacity 5) holds.
        self.assertEqual(self.h2load(f"https://localhost:{port}/api/data"), (5, 15))
        # An HTTP/1.1 client on the same listener still gets HTTP/1.1.
        self.assertEqual(self.curl(f"https://localhost:{port}/hello", "--http1.1")[:2], (200, "1.1"))
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, "ratekeeper_proxy_http2_connections_total"), 2)  # curl's, h2load's

    def test_h2c_with_prior_knowledge(self):
        _, port, _ = self.proxy()
        code, version, body = self.curl(f"http://127.0.0.1:{port}/hello?x=1", "--http2-prior-knowledge")
        self.assertEqual((code, version), (200, "2"))
        self.assertEqual(json.loads(body)["path"], "/hello?x=1")
        self.assertEqual(self.h2load(f"http://127.0.0.1:{port}/api/data", n=12, streams=4), (5, 7))
        self.assertEqual(self.curl(f"http://127.0.0.1:{port}/hello")[:2], (200, "1.1"))

    def test_streams_one_after_another_reuse_one_upstream_connection(self):
        # Each response ends its stream in the same flush that relays the end of its body: the
        # upstream connection, read whole, goes back to the pool all the same.
        _, port, admin = self.proxy(capacity=100)
        self.assertEqual(self.h2load(f"http://127.0.0.1:{port}/api/data", n=30, streams=1), (30, 0))
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_connections_total{state="opened"}'), 1)
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_connections_total{state="reused"}'), 29)

    def test_an_upstream_answering_after_its_timeout_is_a_504_on_the_stream(self):
        rk, port, admin = self.proxy(capacity=100, upstream=", timeout: 400ms")
        started = time.monotonic()
        code, version, body = self.curl(f"http://127.0.0.1:{port}/sleep/4000", "--http2-prior-knowledge")
        self.assertEqual((code, version), (504, "2"))
        self.assertIn("upstream", json.loads(body)["error"].lower())
        self.assertLess(time.monotonic() - started, 3)  # not the upstream's 4 s
        # An answer within the timeout, several times over: each operation has its own.
        self.assertEqual(self.curl(f"http://127.0.0.1:{port}/sleep/250", "--http2-prior-knowledge")[:2], (200, "2"))
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_errors_total{kind="timeout"}'), 1)
        self.assertRegex(rk.log(), r"504 \(timeout\) for GET /sleep/4000 \(HTTP/2\): upstream .*: "
                                   r"nothing read or written for upstream\.timeout")

    def test_an_upstream_timeout_bounds_each_read_not_the_whole_response(self):
        # 6 bytes 150 ms apart: 900 ms in all under a timeout of 400 ms, relayed whole.
        _, port, admin = self.proxy(capacity=100, upstream=", timeout: 400ms")
        for version in ("--http2-prior-knowledge", "--http1.1"):
            code, _, body = self.curl(f"http://127.0.0.1:{port}/drip/150", version)
            self.assertEqual((code, body), (200, "abcdef"), version)
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_errors_total{kind="aborted"}'), 0)

    def test_an_upstream_stalling_mid_body_past_its_timeout_resets_the_stream_and_says_so(self):
        rk, port, admin = self.proxy(capacity=100, upstream=", timeout: 400ms")
        started = time.monotonic()
        r = run(["curl", "-s", "-o", "-", "--http2-prior-knowledge", f"http://127.0.0.1:{port}/stall/4000"])
        self.assertNotEqual(r.returncode, 0)  # the stream was reset: curl says the transfer failed
        self.assertNotEqual(r.stdout, b"0123456789")
        self.assertLess(time.monotonic() - started, 3)
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_errors_total{kind="aborted"}'), 1)
        self.assertRegex(rk.log(), r"the response to GET /stall/4000 \(HTTP/2\) was cut off: upstream .*"
                                   r"nothing read or written for upstream\.timeout")
        # Over HTTP/1.1 the client's connection is closed short of the length, and the same said.
        r = run(["curl", "-s", "-o", "-", "--http1.1", f"http://127.0.0.1:{port}/stall/4001"])
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(r.stdout, b"01234")
        self.assertRegex(rk.log(), r"the response to GET /stall/4001 was cut off: upstream .*"
                                   r"nothing read or written for upstream\.timeout")
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_errors_total{kind="aborted"}'), 2)

    def test_an_idle_upstream_connection_is_closed_after_idle_timeout(self):
        # One io thread: one pool of upstream connections for every client connection.
        _, port, admin = self.proxy(capacity=100, upstream=", idle_timeout: 200ms", threads=1)
        url = f"http://127.0.0.1:{port}/api/data"
        self.assertEqual(self.h2load(url, n=1, streams=1), (1, 0))
        self.assertEqual(self.h2load(url, n=1, streams=1), (1, 0))  # at once: reused
        time.sleep(1.5)
        self.assertEqual(self.h2load(url, n=1, streams=1), (1, 0))  # idle too long: a new one
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_connections_total{state="opened"}'), 2)
        self.assertEqual(metric(text, 'ratekeeper_proxy_upstream_connections_total{state="reused"}'), 1)

    def test_bodies_both_ways_through_flow_control(self):
        _, port, _ = self.proxy(tls=True)
        upload = os.path.join(self.tmp, "upload.bin")
        with open(upload, "wb") as f:
            f.write(os.urandom(600_000))
        code, _, body = self.curl(f"https://localhost:{port}/upload", "--http2", "--data-binary", f"@{upload}")
        self.assertEqual(code, 200)
        self.assertEqual(json.loads(body)["body_bytes"], 600_000)
        r = run(["curl", "-s", "--http2", "--cacert", self.certs.ca, f"https://localhost:{port}/bytes/5000000"])
        self.assertEqual(len(r.stdout), 5_000_000)
        self.assertEqual(r.stdout[:512], (bytes(range(256)) * 2))
        # Over the body limit (1 MiB): 413, then RST_STREAM NO_ERROR so the client stops sending
        # (nghttp, the nghttp2 project's client, shows the frames).
        with open(upload, "wb") as f:
            f.write(b"x" * 2_000_000)
        r = run(["nghttp", "-v", "--no-verify-peer", "-d", upload, f"https://localhost:{port}/upload"], timeout=60)
        text = r.stdout.decode(errors="replace")
        self.assertIn(":status: 413", text)
        self.assertIn("RST_STREAM frame", text)
        self.assertIn("error_code=NO_ERROR", text)

    def test_a_header_block_over_the_limit_is_431(self):
        _, port, _ = self.proxy()
        code, version, _ = self.curl(f"http://127.0.0.1:{port}/hello", "--http2-prior-knowledge",
                                     "-H", "X-Big: " + "a" * 20_000)
        self.assertEqual((code, version), (431, "2"))

    def raw(self, port):
        sock = socket.create_connection(("127.0.0.1", port))
        self.addCleanup(sock.close)
        sock.sendall(H2_PREFACE + h2_frame(SETTINGS, 0, 0))
        return sock

    def assert_serving(self, port):
        self.assertEqual(self.curl(f"http://127.0.0.1:{port}/hello", "--http2-prior-knowledge")[:2], (200, "2"))

    def reset_flood(self, port, streams):
        """`streams` streams, each opened and cancelled at once (Rapid Reset, CVE-2023-44487);
        the frames the server sent back until it closed or went quiet."""
        sock = self.raw(port)
        # On the limited path: past the first few, the requests are answered 429 by the proxy
        # itself (the upstream is not what is measured).
        flood = b"".join(h2_frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, hpack_get("/api/data"))
                         + h2_frame(RST_STREAM, 0, 2 * i + 1, struct.pack(">I", 8))  # CANCEL
                         for i in range(streams))
        try:
            sock.sendall(flood)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return h2_frames(sock, timeout=3)

    def goaways(self, admin):
        _, text = plain_get(admin, "/metrics")
        return {code: metric(text, f'ratekeeper_proxy_http2_goaways_total{{error="{code}"}}')
                for code in ("PROTOCOL_ERROR", "INTERNAL_ERROR", "ENHANCE_YOUR_CALM")}

    def test_rapid_reset_flood_ends_the_connection(self):
        rk, port, admin = self.proxy()
        # Within the bound (a burst of 1000 resets): the connection goes on.
        self.assertNotIn(GOAWAY, [f[0] for f in self.reset_flood(port, 300)])
        self.assertEqual(sum(self.goaways(admin).values()), 0)
        # Beyond it: GOAWAY, the connection ends; other clients are served on. The end is
        # logged and counted: an attack is seen.
        frames = self.reset_flood(port, 3000)
        self.assertIn(GOAWAY, [f[0] for f in frames], [f[0] for f in frames][:20])
        self.assert_serving(port)
        self.assertEqual(sum(self.goaways(admin).values()), 1)
        self.assertRegex(rk.log(), r"HTTP/2 connection of 127\.0\.0\.1 ended with GOAWAY [A-Z_]+")

    def test_continuation_flood_ends_the_connection(self):
        rk, port, admin = self.proxy()
        sock = self.raw(port)
        block = hpack_get("/c")
        frames = [h2_frame(HEADERS, END_STREAM, 1, block)]  # no END_HEADERS: CONTINUATION follows
        frames += [h2_frame(CONTINUATION, 0, 1, b"\x40\x01a\x01b") for _ in range(200)]
        try:
            sock.sendall(b"".join(frames))
        except (BrokenPipeError, ConnectionResetError):
            pass
        received = h2_frames(sock)
        self.assertIn(GOAWAY, [f[0] for f in received])
        self.assertNotIn(HEADERS, [f[0] for f in received])  # no response: the request never completed
        self.assert_serving(port)
        self.assertEqual(self.goaways(admin)["ENHANCE_YOUR_CALM"], 1)
        # The line docs/configuration.md shows, as logged.
        documented = re.search(r"```text\n(proxy: HTTP/2 connection of .*)\n```",
                               open(os.path.join(ROOT, "docs", "configuration.md")).read()).group(1)
        self.assertIn(documented, rk.log())

    def test_a_client_letting_no_response_through_is_reset_after_the_upstream_timeout(self):
        # Its window shut (SETTINGS_INITIAL_WINDOW_SIZE 0), the client reads the frames it is
        # sent but lets no DATA through: the stream would hold its upstream connection and
        # buffer for ever. It is reset after upstream.timeout, logged and counted.
        rk, port, admin = self.proxy(upstream=", timeout: 1s")
        sock = socket.create_connection(("127.0.0.1", port))
        self.addCleanup(sock.close)
        no_window = struct.pack(">HI", 0x4, 0)  # SETTINGS_INITIAL_WINDOW_SIZE = 0
        sock.sendall(H2_PREFACE + h2_frame(SETTINGS, 0, 0, no_window)
                     + h2_frame(HEADERS, END_STREAM | END_HEADERS, 1, hpack_get("/bytes/1000000")))
        frames = h2_frames(sock, timeout=4)
        resets = [f for f in frames if f[0] == RST_STREAM and f[2] == 1]
        self.assertTrue(resets, [f[0] for f in frames])
        self.assertNotIn(DATA, [f[0] for f in frames if f[2] == 1])
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, "ratekeeper_proxy_http2_streams_stalled_total"), 1)
        self.assertIn("the client let none of it through for upstream.timeout", rk.log())
        self.assert_serving(port)

    def slow_reader(self, port):
        """A connection to the proxy whose receive buffer is small: it takes little unread."""
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        self.addCleanup(sock.close)
        return sock

    def test_a_connection_reading_nothing_is_closed_however_many_frames_it_sends(self):
        # Its windows wide open, the client reads none of the bytes sent to it, and sends
        # WINDOW_UPDATE frames on and on (each moves the read deadline): the write under way
        # ends the connection after upstream.timeout, said in the log.
        rk, port, admin = self.proxy(upstream=", timeout: 1s")
        sock = self.slow_reader(port)
        wide = struct.pack(">HI", 0x4, 0x1000000)  # SETTINGS_INITIAL_WINDOW_SIZE: 16 MiB
        more = h2_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x10000000))
        sock.sendall(H2_PREFACE + h2_frame(SETTINGS, 0, 0, wide) + more
                     + h2_frame(HEADERS, END_STREAM | END_HEADERS, 1, hpack_get("/bytes/200000000")))
        closed = False
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not closed:
            try:
                sock.sendall(h2_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)))
            except OSError:
                closed = True
            time.sleep(0.3)
        self.assertTrue(closed, "still open after 15 s")
        self.assertRegex(rk.log(), r"HTTP/2 connection of 127\.0\.0\.1 closed: it read none of what was written "
                                   r"to it for upstream\.timeout")
        self.assert_serving(port)

    def test_an_http1_client_reading_nothing_is_closed_after_the_upstream_timeout_and_said(self):
        # The same over HTTP/1.1: a response write that does not complete in upstream.timeout.
        rk, port, admin = self.proxy(upstream=", timeout: 1s")
        sock = self.slow_reader(port)
        sock.sendall(b"GET /bytes/200000000 HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 15
        while "was given up" not in rk.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertRegex(rk.log(), r"the response to GET /bytes/200000000 of 127\.0\.0\.1 was given up: the client "
                                   r"let none of it through for upstream\.timeout; the connection is closed")
        _, text = plain_get(admin, "/metrics")
        self.assertEqual(metric(text, "ratekeeper_proxy_client_aborted_total"), 1)

    def test_an_idle_connection_is_closed_however_often_it_pings(self):
        _, port, _ = self.proxy(http="{read_timeout: 1s}")
        sock = self.raw(port)
        sock.settimeout(0.2)
        start = time.monotonic()
        closed_after = None
        while time.monotonic() - start < 6:
            try:
                sock.sendall(h2_frame(PING, 0, 0, b"12345678"))
                while sock.recv(65536):
                    pass
                closed_after = time.monotonic() - start  # recv returned b"": closed
                break
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - start
                break
        self.assertIsNotNone(closed_after, "still open after 6 s of pings")
        self.assertLess(closed_after, 4)

    def test_streams_beyond_the_concurrency_limit_are_refused(self):
        _, port, _ = self.proxy()
        sock = self.raw(port)
        # 150 requests whose bodies never come: 100 streams may be open at once.
        opened = b"".join(h2_frame(HEADERS, END_HEADERS, 2 * i + 1, hpack_get("/slow")) for i in range(150))
        sock.sendall(opened + h2_frame(PING, 0, 0, b"12345678"))
        frames = h2_frames(sock, timeout=2)
        refused = [f for f in frames if f[0] == RST_STREAM and struct.unpack(">I", f[3])[0] == 0x7]
        self.assertGreaterEqual(len(refused), 50, [f[0] for f in frames][:20])
        self.assert_serving(port)

    def test_a_request_not_whole_within_request_timeout_is_408(self):
        _, port, _ = self.proxy(http="{request_timeout: 1s}")
        sock = self.raw(port)
        # A header block, then a body that never ends (a trickling client).
        sock.sendall(h2_frame(HEADERS, END_HEADERS, 1, b"\x83\x86\x04\x07/upload\x01\x09localhost")
                     + h2_frame(DATA, 0, 1, b"a little"))
        frames = h2_frames(sock, timeout=6)
        answers = [f for f in frames if f[0] == HEADERS and f[2] == 1]
        self.assertTrue(answers, [f[0] for f in frames])
        self.assertIn(b"408", answers[0][3])
        self.assertIn(RST_STREAM, [f[0] for f in frames if f[2] == 1])
        self.assert_serving(port)

    def test_connect_is_501_and_a_lower_case_method_or_a_fragment_is_400(self):
        _, port, _ = self.proxy()
        sock = self.raw(port)
        # CONNECT (no :path), `post` (a method frameworks upper-case), /api/data#x (a path an
        # application cutting the fragment serves as /api/data): none reaches a rule or the upstream.
        connect = b"\x02\x07CONNECT" + b"\x01\x0elocalhost:8443"
        post = b"\x02\x04post\x86\x04\x09/api/data\x01\x09localhost"
        sock.sendall(h2_frame(HEADERS, END_STREAM | END_HEADERS, 1, connect)
                     + h2_frame(HEADERS, END_STREAM | END_HEADERS, 3, post)
                     + h2_frame(HEADERS, END_STREAM | END_HEADERS, 5, hpack_get("/api/data#x")))
        frames = h2_frames(sock, timeout=3)
        # The statuses are HPACK-coded (400 from the static table, 501 Huffman): each stream's
        # answer is told by its body, which is the proxy's own.
        bodies = {f[2]: f[3] for f in frames if f[0] == DATA}
        self.assertIn(b"not implemented", bodies.get(1, b""), frames)
        self.assertIn(b"upper case", bodies.get(3, b""), frames)
        self.assertIn(b"fragment", bodies.get(5, b""), frames)
        self.assertEqual({f[2] for f in frames if f[0] == HEADERS}, {1, 3, 5})
        self.assert_serving(port)

    def test_one_host_goes_on_the_authority(self):
        _, port, _ = self.proxy()
        sock = self.raw(port)
        # :authority localhost, then a Host field naming another host (literal, indexed name 38).
        block = hpack_get("/hello") + b"\x0f\x17\x0cevil.example"
        sock.sendall(h2_frame(HEADERS, END_STREAM | END_HEADERS, 1, block))
        frames = h2_frames(sock, timeout=3)
        body = b"".join(f[3] for f in frames if f[0] == DATA and f[2] == 1)
        self.assertEqual(json.loads(body)["hosts"], ["localhost"])

    def test_a_protocol_error_ends_the_connection_with_goaway(self):
        _, port, _ = self.proxy()
        sock = self.raw(port)
        sock.sendall(h2_frame(DATA, 0, 0, b"data on stream 0"))
        frames = h2_frames(sock)
        goaways = [f for f in frames if f[0] == GOAWAY]
        self.assertTrue(goaways)
        self.assertEqual(struct.unpack(">I", goaways[-1][3][4:8])[0], 0x1)  # PROTOCOL_ERROR


DEPLOY = os.path.join(ROOT, "deploy")


class Monitoring(unittest.TestCase):
    """The Prometheus alerting rules and the Grafana dashboard in deploy/: valid, tested, and
    about series a real ratekeeper exposes."""

    def promtool(self, *args, cwd=None):
        r = run(["promtool", *args], timeout=120) if cwd is None else subprocess.run(
            ["promtool", *args], capture_output=True, timeout=120, cwd=cwd)
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr).decode())
        return r

    def test_alerting_rules_check_and_pass_their_tests(self):
        rules = os.path.join(DEPLOY, "prometheus")
        self.promtool("check", "rules", "ratekeeper-alerts.yml", cwd=rules)
        self.promtool("test", "rules", "ratekeeper-alerts.test.yml", cwd=rules)

    def dashboard_exprs(self):
        with open(os.path.join(DEPLOY, "grafana", "ratekeeper.json")) as f:
            dashboard = json.load(f)
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        self.assertGreater(len(exprs), 10)
        return exprs

    def test_dashboard_queries_are_valid_promql(self):
        # Grafana's variables as a query would have them, each query a recording rule for promtool.
        tmp = tempfile.mkdtemp(prefix="ratekeeper-dash-")
        self.addCleanup(shutil.rmtree, tmp, True)
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"dashboard:query{i}",
             "expr": e.replace("$__rate_interval", "5m").replace("$__range", "1h").replace("$instance", ".*")}
            for i, e in enumerate(self.dashboard_exprs())]}]}
        path = os.path.join(tmp, "dashboard.yml")
        with open(path, "w") as f:
            json.dump(rules, f)  # JSON is YAML
        self.promtool("check", "rules", path)

    def test_every_series_they_name_is_exposed(self):
        upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        self.addCleanup(lambda: (upstream.shutdown(), upstream.server_close()))
        tmp = tempfile.mkdtemp(prefix="ratekeeper-mon-")
        self.addCleanup(shutil.rmtree, tmp, True)
        port, admin = free_ports(2)
        rk = Ratekeeper(tmp, f"""listen: 127.0.0.1:{port}
upstream: {{url: "http://127.0.0.1:{upstream.server_address[1]}"}}
admin: {{listen: 127.0.0.1:{admin}}}
access_log: {{path: {os.path.join(tmp, "access.log")}}}
rules:
  - name: api
    match: {{path: /api}}
    limits:
      - {{capacity: 5, refill_rate: 1}}
""")
        self.addCleanup(rk.stop)
        plain_get(port, "/api")
        _, text = plain_get(admin, "/metrics")
        families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
        with open(os.path.join(DEPLOY, "prometheus", "ratekeeper-alerts.yml")) as f:
            sources = f.read() + "\n".join(self.dashboard_exprs())
        named = set(re.findall(r"\b((?:ratekeeper|process)_[a-z0-9_]+)", sources))
        self.assertGreater(len(named), 15)
        for name in sorted(named):
            family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in families else name
            self.assertIn(family, families, f"{name} is named in deploy/ but not exposed")
        # And the exposition itself passes Prometheus' own lint.
        r = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr).decode())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--ratekeeper", default=RATEKEEPER)
    args, rest = parser.parse_known_args()
    RATEKEEPER = os.path.abspath(args.ratekeeper)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
