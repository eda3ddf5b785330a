"""The ASGI middleware's CPU per request, in process: ratekeeper.asgi.RateLimitMiddleware around
a trivial ASGI app (no server, no sockets of its own), 32 requests in flight on one asyncio
loop, every request checked and admitted; the bare app for reference. Prints, per row, the
medians over --repeat runs of the event loop thread's CPU µs per request (what an ASGI
server's worker pays) and the whole process's (the store's thread too). On Redis it starts
its own redis-server on a free loopback port and reports its CPU per decision.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_asgi_loop.py [--store memory|redis]
        [--requests N] [--repeat R]
"""

import argparse
import asyncio
import socket
import statistics
import subprocess
import tempfile
import time

import ratekeeper
from ratekeeper.asgi import RateLimitMiddleware

from python_fastapi_app import RULES  # the rule of bench/python_fastapi.sh's app

IN_FLIGHT = 32
# What wrk sends.
HEADERS = [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk"), (b"accept", b"*/*")]


async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def requests(asgi, n: int) -> None:
    async def receive():
        return {"type": "http.request"}

    async def send(message):
        pass

    async def worker(k: int) -> None:
        for _ in range(k):
            scope = {"type": "http", "method": "GET", "path": "/empty", "raw_path": b"/empty", "query_string": b"",
                     "headers": HEADERS, "client": ("127.0.0.1", 5555), "http_version": "1.1", "scheme": "http"}
            await asgi(scope, receive, send)

    await asyncio.gather(*[worker(n // IN_FLIGHT) for _ in range(IN_FLIGHT)])


def redis_cpu(port: int) -> float:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"INFO cpu\r\n")
        text = b""
        while b"used_cpu_user:" not in text or not text.endswith(b"\r\n"):
            text += s.recv(65536)
    fields = dict(line.split(":", 1) for line in text.decode().splitlines() if ":" in line)
    return float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=["memory", "redis"], default="redis")
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    redis = port = None
    workdir = tempfile.TemporaryDirectory()
    if args.store == "redis":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no", "--dir", workdir.name], stdout=subprocess.DEVNULL)
        for _ in range(200):
            try:
                redis_cpu(port)
                break
            except OSError:
                time.sleep(0.05)
    store = f"redis://127.0.0.1:{port}" if port else "memory://"
    limiter = ratekeeper.Limiter(yaml=RULES, store=store)
    rows = {"bare app": app, "with the middleware": RateLimitMiddleware(app, limiter)}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in rows}
    n = args.requests

    async def run() -> None:
        for name, asgi in rows.items():
            await requests(asgi, 2_000)  # warm up
        for _ in range(args.repeat):
            for name, asgi in rows.items():
                before = redis_cpu(port) if port else 0.0
                loop0, process0 = time.thread_time(), time.process_time()
                await requests(asgi, n)
                loop1, process1 = time.thread_time(), time.process_time()
                after = redis_cpu(port) if port else 0.0
                results[name].append(((loop1 - loop0) / n * 1e6, (process1 - process0) / n * 1e6,
                                      (after - before) / n * 1e6))

    try:
        asyncio.run(run())
    finally:
        limiter.close()
        if redis is not None:
            redis.terminate()
            redis.wait()
        workdir.cleanup()
    print(f"{n} requests, {IN_FLIGHT} in flight, store {args.store}, medians of {args.repeat} runs")
    print("| row | loop thread µs / request | process µs / request | Redis CPU µs / request |")
    print("|---|---:|---:|---:|")
    for name, runs in results.items():
        loop, process, redis_us = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"| {name} | {loop:.2f} | {process:.2f} | {redis_us:.2f} |")


if __name__ == "__main__":
    main()
