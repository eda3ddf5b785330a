"""The recipes of docs/recipes.md, run for real: a real redis-server, the ratekeeper binary,
and the seed's FastAPI application under uvicorn, each on a free loopback port.

    python3 tests/recipes/recipes_test.py --ratekeeper build/ratekeeper
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = os.path.join(ROOT, "docs", "recipes")
RATEKEEPER = os.path.join(ROOT, "build", "ratekeeper")
BURST = 200
CAPACITY = 100


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from ports import free_port, free_ports  # noqa: E402


def request(port, method, path, headers=None, body=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def wait_until_serving(port, path, proc, what, deadline=60.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            request(port, "GET", path, timeout=2)
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer {path} on port {port}")


def burst(port, path, n=BURST):
    """n requests on n connections, released together; their statuses and headers."""
    ready = threading.Barrier(n)
    results = [None] * n

    def one(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.connect()
        ready.wait()
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            results[i] = (resp.status, dict(resp.getheaders()), resp.read())
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


class Processes:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ratekeeper-recipe-")
        self.procs = []

    def start(self, args, name, env=None):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=self.dir)
        self.procs.append((proc, log, name))
        return proc

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log"), "rb") as f:
            return f.read().decode(errors="replace")

    def redis(self):
        port = free_port()
        proc = self.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                           "--save", "", "--appendonly", "no"], "redis")
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return port
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("redis-server exited: " + self.log("redis"))
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def ratekeeper(self, config_text, wait_port, wait_path):
        path = os.path.join(self.dir, "ratekeeper.yaml")
        with open(path, "w") as f:
            f.write(config_text)
        proc = self.start([RATEKEEPER, "serve", "--config", path], "ratekeeper")
        wait_until_serving(wait_port, wait_path, proc, "ratekeeper")
        return proc

    def uvicorn(self, module, env_extra=None):
        port = free_port()
        env = dict(os.environ)
        env.update(env_extra or {})
        proc = self.start(["/usr/bin/python3", "-m", "uvicorn", "--app-dir", RECIPES,
                           "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                           module + ":app"], "uvicorn", env)
        wait_until_serving(port, "/_recipe/hits", proc, "uvicorn")
        return port

    def stop(self):
        for proc, log, _ in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# A store failure must never pass for a decision: the sanitizer builds are slow enough for a
# check queued behind 200 connections to miss the default 100 ms deadline, and the default
# failure policy (allow) would then admit it.
RULES = f"""
failure_policy: {{default: deny}}
rules:
  - name: api_data
    match: {{path: /api/data}}
    limits: [{{algorithm: token_bucket, capacity: {CAPACITY}, refill_rate: 0.001}}]
logging:
  decisions: {{enabled: false}}
"""


class SeedAppBehindTheProxy(unittest.TestCase):
    def setUp(self):
        self.p = Processes()
        self.addCleanup(self.p.stop)

    def test_burst_of_200_lets_exactly_100_reach_the_app(self):
        redis_port = self.p.redis()
        app_port = self.p.uvicorn("seed_app")
        listen, admin = free_ports(2)
        self.p.ratekeeper(f"""
listen: 127.0.0.1:{listen}
threads: 1
store: {{url: "redis://127.0.0.1:{redis_port}", command_timeout: 10s}}
upstream: {{url: "http://127.0.0.1:{app_port}"}}
admin: {{listen: 127.0.0.1:{admin}}}
""" + RULES, admin, "/healthz")

        results = burst(listen, "/api/data")
        statuses = [r[0] for r in results]
        self.assertEqual(statuses.count(200), CAPACITY,
                         f"{statuses}\n{self.p.log('ratekeeper')[-3000:]}")
        self.assertEqual(statuses.count(429), BURST - CAPACITY, statuses)
        for status, headers, body in results:
            if status == 429:
                self.assertEqual(json.loads(body)["error"], "Rate limit exceeded")
                self.assertIn("Retry-After", headers)
            else:
                self.assertEqual(json.loads(body), {"data": "success"})
                self.assertIn("RateLimit", headers)
        _, _, hits = request(app_port, "GET", "/_recipe/hits")
        self.assertEqual(json.loads(hits).get("/api/data"), CAPACITY)

        # Unmatched paths are forwarded without limit; ratekeeper's own endpoints are not on
        # the proxy's listener (the application's 404), but on the admin one.
        status, _, body = request(listen, "GET", "/api/profile", {"X-User-ID": "ana"})
        self.assertEqual((status, json.loads(body)), (200, {"profile": {"user": "ana"}}))
        self.assertEqual(request(listen, "GET", "/metrics")[0], 404)
        status, _, metrics = request(admin, "GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(b"ratekeeper_proxy_", metrics)


class SeedAppCallingTheDecisionApi(unittest.TestCase):
    def setUp(self):
        self.p = Processes()
        self.addCleanup(self.p.stop)

    def test_burst_of_200_lets_exactly_100_reach_the_handler(self):
        redis_port = self.p.redis()
        listen = free_port()
        self.p.ratekeeper(f"""
listen: 127.0.0.1:{listen}
threads: 1
store: {{url: "redis://127.0.0.1:{redis_port}", command_timeout: 10s}}
""" + RULES, listen, "/healthz")
        app_port = self.p.uvicorn("checked_app", {"RATEKEEPER_URL": f"http://127.0.0.1:{listen}",
                                                  "RATEKEEPER_TIMEOUT": "30"})

        results = burst(app_port, "/api/data")
        statuses = [r[0] for r in results]
        self.assertEqual(statuses.count(200), CAPACITY,
                         f"{statuses}\n{self.p.log('ratekeeper')[-3000:]}")
        self.assertEqual(statuses.count(429), BURST - CAPACITY, statuses)
        for status, headers, body in results:
            if status == 429:
                self.assertEqual(json.loads(body)["error"], "Rate limit exceeded")
                self.assertIn("retry-after", {k.lower() for k in headers})
        _, _, hits = request(app_port, "GET", "/_recipe/hits")
        self.assertEqual(json.loads(hits).get("/api/data"), CAPACITY)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--ratekeeper", default=RATEKEEPER)
    args, rest = parser.parse_known_args()
    RATEKEEPER = os.path.abspath(args.ratekeeper)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
