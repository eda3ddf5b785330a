"""Fixtures of the Python package's tests: real redis-server processes on free loopback ports,
and the documented FastAPI application (docs/python/app.py) under uvicorn with several workers.

Run by ctest (`python` test): PYTHONPATH holds the built package (<build>/python)."""

import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
from ports import free_port, free_ports  # noqa: E402


class RedisServer:
    def __init__(self):
        self.port = free_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def redis():
    server = RedisServer()
    yield server
    server.stop()


class App:
    """A FastAPI application under uvicorn (docs/python/app.py unless `module` names another
    in `app_dir`): `workers` processes sharing one listening socket."""

    def __init__(self, config: str, store: str, workers: int, app_dir: str = os.path.join(SOURCE, "docs", "python"),
                 module: str = "app:app"):
        self.port = free_port()
        self.log = tempfile.TemporaryFile()
        env = dict(os.environ, RATEKEEPER_CONFIG=config, RATEKEEPER_STORE=store)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", app_dir, module,
             "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(workers), "--log-level", "warning",
             "--no-proxy-headers"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"uvicorn exited: {self.output()}")
            try:
                if httpx.get(f"{self.url}/openapi.json", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        # Not serving (its workers failing to start, say): stopped here, as no fixture will.
        self.stop()
        raise RuntimeError(f"uvicorn did not start: {self.output()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def app_factory():
    apps = []

    def start(config: str, store: str, workers: int = 3, **where) -> App:
        app = App(config, store, workers, **where)
        apps.append(app)
        return app

    yield start
    for app in apps:
        app.stop()
