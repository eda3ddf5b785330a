"""ratekeeper's native module: its API, asyncio and threads against a real redis-server,
store failure, and bad input."""

import asyncio
import os
import subprocess
import sys
import threading

import pytest

import ratekeeper
from conftest import SOURCE
from ratekeeper import Limiter
from ratekeeper._native import RequestDecision

# Answers from Redis, not from the failure policy, however loaded the machine: a store deadline
# far above any stall.
RULES = """
store: {command_timeout: 2s}
rules:
  - name: api
    match: {path_prefix: /api/}
    identity: {type: header, header: X-User-ID}
    limits: [{algorithm: fixed_window, limit: 20, window: 1h}]
  - name: bucket
    match: false
    identity: {type: ip}
    limits: [{algorithm: token_bucket, capacity: 3, refill_rate: 0.001}]
  - name: closed
    match: false
    identity: {type: ip}
    limits: [{algorithm: fixed_window, limit: 5, window: 1h}]
    on_store_error: deny
"""


def test_a_check_carries_the_decision_and_its_headers(redis):
    limiter = Limiter(yaml=RULES, store=redis.url)
    assert limiter.rules == ["api", "bucket", "closed"]
    assert limiter.store_kind == "redis"
    decisions = [limiter.check("bucket", "ip:192.0.2.1") for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions[:3]] == [2, 1, 0]
    assert decisions[0].limit == 3
    assert decisions[0].retry_after == 0
    denied = decisions[3]
    assert not denied and denied.retry_after > 900  # one token per 1000 s
    assert dict(denied.headers)["Retry-After"] == str(int(-(-denied.retry_after // 1)))
    assert dict(denied.headers)["RateLimit-Policy"] == '"bucket";q=3;w=3000'
    assert denied.rule == "bucket" and denied.identity == "ip:192.0.2.1"
    limiter.close()


def test_a_decision_is_read_whole_after_its_limiter_is_gone(redis):
    # A decision keeps what its headers and body are written from: it reads the same once the
    # limiter that made it is closed and collected.
    import gc

    limiter = Limiter(yaml=RULES, store=redis.url)
    many = limiter.check_many("bucket", ["ip:192.0.2.7"] * 4)
    expected = [(d.rule, d.identity, d.headers, d.body) for d in many]
    limiter.close()
    del limiter
    gc.collect()
    assert [(d.rule, d.identity, d.headers, d.body) for d in many] == expected
    assert [d.allowed for d in many] == [True, True, True, False]
    assert dict(many[3].headers)["RateLimit"] == '"bucket";r=0;t=' + dict(many[3].headers)["Retry-After"]
    assert many[3].body.startswith(b'{"error":"Rate limit exceeded","retryAfter":')
    assert many[0].body == b""


def test_checks_from_threads_and_coroutines_are_exact(redis):
    limiter = Limiter(yaml=RULES, store=redis.url, threads=2)
    admitted = []
    lock = threading.Lock()

    def worker():
        mine = sum(limiter.check("api", "user:threads").allowed for _ in range(10))
        with lock:
            admitted.append(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 20  # 80 asked of a limit of 20

    async def burst():
        decisions = await asyncio.gather(*[limiter.check_async("api", "user:asyncio") for _ in range(60)])
        return sum(d.allowed for d in decisions)

    assert asyncio.run(burst()) == 20
    limiter.close()


def test_the_event_loop_runs_while_the_store_answers(redis):
    """A check in flight leaves the loop free: a ticker runs between the awaits."""
    limiter = Limiter(yaml=RULES, store=redis.url)

    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        for _ in range(50):
            await limiter.check_async("api", "user:loop")
        stop.set()
        await task
        return ticks

    assert asyncio.run(main()) >= 50
    limiter.close()


def test_a_request_is_decided_as_the_server_decides_it(redis):
    limiter = Limiter(yaml=RULES, store=redis.url)
    headers = [(b"x-user-id", b"42"), (b"host", b"example")]
    answers = [limiter.check_request("GET", "/api/x?q=1", headers, "192.0.2.9") for _ in range(21)]
    assert [a.status for a in answers].count(200) == 20
    last = answers[-1]
    assert not last.admitted and last.status == 429
    assert last.content_type == "application/json"
    assert last.body.startswith(b'{"error":"Rate limit exceeded","retryAfter":')
    assert "Retry-After" in dict(last.headers)
    assert last.asgi_headers == [(n.lower().encode(), v.encode()) for n, v in last.headers]
    assert dict(last.asgi_headers)[b"retry-after"] == dict(last.headers)["Retry-After"].encode()
    unmatched = limiter.check_request("GET", "/elsewhere", headers, "192.0.2.9")
    assert unmatched.admitted and unmatched.rule == "" and unmatched.headers == []

    async def one():
        return await limiter.check_request_async("GET", "/api/y", [("X-User-ID", "7")], "192.0.2.9")

    admitted = asyncio.run(one())
    assert admitted.admitted and admitted.rule == "api"
    # Headers given as str pairs and as bytes pairs identify the user alike: user 7 has its own budget.
    assert admitted.headers == answers[0].headers
    # One rule for a request, its identity resolved from it.
    by_rule = limiter.check_rule_request("bucket", "GET", "/anything", [], "192.0.2.44")
    assert by_rule.allowed and by_rule.identity == "ip:192.0.2.44"
    limiter.close()


def test_a_store_that_fails_is_answered_by_each_rules_policy(redis):
    limiter = Limiter(yaml=RULES, store=redis.url)
    assert limiter.check("api", "user:1").allowed
    redis.stop()
    opened = limiter.check("api", "user:1")  # default: allow
    assert opened.allowed and opened.by_failure_policy
    closed = limiter.check("closed", "ip:192.0.2.1")
    assert not closed.allowed and closed.by_failure_policy and closed.retry_after > 0

    async def closed_async():
        return await limiter.check_async("closed", "ip:192.0.2.2")

    answered = asyncio.run(closed_async())
    assert not answered.allowed and answered.by_failure_policy
    assert not limiter.ready
    limiter.close()


def test_bad_input_is_refused_with_its_reason(tmp_path):
    with pytest.raises(ValueError, match=r"<yaml>: rules\[0\]\.limits"):
        Limiter(yaml="rules: [{name: a}]")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: a\n    limits: [{algorithm: token_bucket, capacity: -1, refill_rate: 1}]\n")
    with pytest.raises(ValueError, match=r"bad\.yaml.*rules\[0\]\.limits\[0\]\.capacity"):
        Limiter(str(bad))
    with pytest.raises(ValueError, match="either"):
        Limiter()
    with pytest.raises(ValueError, match="store"):
        Limiter(yaml=RULES, store="nonsense://x")
    limiter = Limiter(yaml=RULES)
    assert limiter.store_kind == "memory"
    with pytest.raises(ValueError, match="unknown rule"):
        limiter.check("nope", "user:1")
    with pytest.raises(ValueError):
        limiter.check("api", "user:1", -1)
    with pytest.raises(ValueError):
        limiter.check("api", "")
    with pytest.raises(TypeError):
        limiter.check("api", 42)
    with pytest.raises(ValueError, match="path must start with /"):
        limiter.check_request("GET", "api", [], "192.0.2.1")
    with pytest.raises(ValueError, match="pairs"):
        limiter.check_request("GET", "/api", [("a", "b", "c")], "192.0.2.1")
    with pytest.raises(TypeError):
        limiter.check_request("GET", "/api", [("a", 1)], "192.0.2.1")
    with pytest.raises(ValueError, match="IP address"):
        limiter.check_request("GET", "/api", [], "not-an-ip")
    # A request the rules cannot read is a 400, not an exception.
    refused = limiter.check_request("GET", "/api/%zz", [], "192.0.2.1")
    assert refused.status == 400 and b"Bad request" in refused.body
    limiter.close()
    with pytest.raises(ValueError, match="closed"):
        limiter.check("api", "user:1")
    limiter.close()  # twice: nothing more


def test_the_documented_configuration_loads():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python", "ratekeeper.yaml")
    limiter = ratekeeper.Limiter(path)
    assert limiter.rules == ["api_data", "api_profile", "api_items", "login", "ws_echo"]
    assert limiter.check("api_profile", "user:alice").limit == 600  # alice's tier: pro
    limiter.close()


def test_many_identities_in_one_call_are_each_decided_on_their_own(redis):
    limiter = Limiter(yaml=RULES, store=redis.url)
    identities = ["user:many-a"] * 25 + ["user:many-b"] * 5
    decisions = limiter.check_many("api", identities)
    assert len(decisions) == 30
    assert sum(d.allowed for d in decisions[:25]) == 20  # a limit of 20: a's 25 overshoot
    assert all(d.allowed for d in decisions[25:])  # b's 5 are not held back by a's denials
    assert all(d.identity == i for d, i in zip(decisions, identities))

    async def batch():
        return await limiter.check_many_async("api", ["user:many-a", "user:many-c"])

    later = asyncio.run(batch())
    assert [d.allowed for d in later] == [False, True]
    assert limiter.check_many("api", []) == []
    with pytest.raises(ValueError):
        limiter.check_many("api", ["user:ok", ""])
    # Many store calls in one: each decision in its place, as it arrives; 21 checks of each of
    # 100 identities under a limit of 20 admit 20 of each.
    crowd = [f"user:crowd-{i % 100}" for i in range(2100)]
    decided = limiter.check_many("api", crowd)
    assert [d.identity for d in decided] == crowd
    assert sum(d.allowed for d in decided) == 2000
    assert all(sum(d.allowed for d in decided[k::100]) == 20 for k in range(100))
    limiter.close()


def test_cancelled_checks_leave_the_others_answered(redis):
    limiter = Limiter(yaml=RULES, store=redis.url)

    async def main():
        tasks = [asyncio.ensure_future(limiter.check_async("api", f"user:cancel-{i}")) for i in range(200)]
        for task in tasks[::2]:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        cancelled = sum(isinstance(r, asyncio.CancelledError) for r in results)
        answered = [r for r in results if not isinstance(r, BaseException)]
        return cancelled, answered

    cancelled, answered = asyncio.run(main())
    assert cancelled == 100
    assert len(answered) == 100 and all(d.allowed for d in answered)
    # A new loop afterwards: its own completions.

    async def after():
        return await limiter.check_async("api", "user:after")

    assert asyncio.run(after()).allowed
    limiter.close()


def test_a_tls_store_is_opened_by_its_url(tmp_path):
    """rediss:// to a redis-server speaking TLS only, its certificate verified against a CA made
    here (openssl); a client that does not trust that CA is answered by the failure policy."""
    import socket
    import subprocess
    import time

    from conftest import free_port

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp_path)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test CA",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key",
        "-out", "server.csr")
    (tmp_path / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
        "-extfile", "san.cnf", "-out", "server.pem")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--tls-cert-file", str(tmp_path / "server.pem"), "--tls-key-file", str(tmp_path / "server.key"),
         "--tls-ca-cert-file", str(tmp_path / "ca.pem"), "--tls-auth-clients", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        trusted = Limiter(yaml=RULES, store=f"rediss://127.0.0.1:{port}?ca_file={tmp_path / 'ca.pem'}")
        assert trusted.store_kind == "redis"
        decisions = [trusted.check("bucket", "ip:192.0.2.1") for _ in range(4)]
        assert [d.allowed for d in decisions] == [True, True, True, False]
        assert not any(d.by_failure_policy for d in decisions)
        trusted.close()
        untrusted = Limiter(yaml=RULES, store=f"rediss://127.0.0.1:{port}")  # the system's CAs
        answered = untrusted.check("closed", "ip:192.0.2.1")
        assert answered.by_failure_policy and not answered.allowed
        untrusted.close()
    finally:
        server.terminate()
        server.wait(10)


def test_an_override_set_by_one_process_reaches_another_within_its_refresh(redis):
    rules = "overrides: {refresh: 50ms}\n" + RULES
    first = Limiter(yaml=rules, store=redis.url)
    second = Limiter(yaml=rules, store=redis.url)
    assert second.override_factor("api", "user:big") == 1.0
    assert first.set_override("api", "user:big", 2, "trial") is False
    assert first.override_factor("api", "user:big") == 2.0  # here at once
    import time

    deadline = time.monotonic() + 10
    while second.override_factor("api", "user:big") != 2.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert second.override_factor("api", "user:big") == 2.0  # there within its refresh
    admitted = sum(d.allowed for d in second.check_many("api", ["user:big"] * 50))
    assert admitted == 40  # 2 × 20, counted on the same keys by both
    assert first.check("api", "user:big").allowed is False
    assert second.remove_override("api", "user:big") is True
    with pytest.raises(ValueError, match="unknown rule"):
        first.set_override("nope", "user:1", 2)
    with pytest.raises(ValueError, match="factor"):
        first.set_override("api", "user:1", 0)
    first.close()
    second.close()


def test_the_documented_limiter_example_runs(redis):
    """docs/python.md's Limiter example, as written, against the documented configuration."""
    text = open(os.path.join(SOURCE, "docs", "python.md"), encoding="utf-8").read()
    section = text[text.index("## `ratekeeper.Limiter`"):]
    example = section[section.index("```python\n") + 10:section.index("```\n", section.index("```python\n") + 10)]
    assert "redis://127.0.0.1:6379" in example
    example = example.replace("redis://127.0.0.1:6379", redis.url)
    run = subprocess.run([sys.executable, "-c", example], cwd=os.path.join(SOURCE, "docs", "python"),
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(ratekeeper.__file__))))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "True 98"
    assert "prints `True 98`" in section


ASGI_RULES = """
rules:
  - name: api
    match: {path_prefix: /api/, methods: [GET]}
    identity: {type: ip}
    limits: [{algorithm: fixed_window, limit: 3, window: 1h}]
"""


def test_an_asgi_scope_is_read_as_the_request_it_describes():
    limiter = Limiter(yaml=ASGI_RULES, store="memory://")
    peer = ("192.0.2.1", 5000)

    async def decide(**scope):
        return await limiter.check_asgi_async({"type": "http", "headers": [], **scope})

    async def main():
        # raw_path as received wins over path; the query follows it.
        first = await decide(method="GET", raw_path=b"/api/a", path="/elsewhere", query_string=b"q=1", client=peer)
        assert first.admitted and first.rule == "api"
        # No raw_path (or an empty one): the path.
        assert (await decide(method="GET", raw_path=b"", path="/api/b", client=peer)).rule == "api"
        assert (await decide(method="GET", path="/api/c", raw_path=b"/other", client=peer)).rule == ""
        # A WebSocket's handshake has no method: a GET, under the same limit (its third request).
        ws = await limiter.check_asgi_async(
            {"type": "websocket", "path": "/api/ws", "raw_path": "/api/ws", "headers": [], "client": peer})
        assert ws.admitted and ws.rule == "api"
        refused = await decide(method="GET", raw_path=b"/api/a", client=peer)
        assert not refused.admitted and refused.status == 429
        # Another method is not this rule's.
        other = await decide(method="POST", raw_path=b"/api/a", client=peer)
        assert other.admitted and other.rule == ""
        # A peer without an address (a Unix socket's) is not trusted to name the client.
        assert (await decide(method="GET", raw_path=b"/api/a", client=None)).status == 400
        # raw_path None (a server without it), client as a list: the path, the host.
        listed = await decide(method="GET", raw_path=None, path="/api/d", client=["192.0.2.9", 1])
        assert listed.admitted and listed.rule == "api"
        with pytest.raises(TypeError):
            await decide(method="GET", raw_path=5, client=peer)
        with pytest.raises(TypeError):
            await decide(method="GET", raw_path=b"/api/a", client=(b"192.0.2.1", 1))
        with pytest.raises(ValueError):
            await limiter.check_asgi_async({"type": "http", "method": "GET", "path": "/api/a"})

    asyncio.run(main())
    limiter.close()


LEAN_RULES = """
logging: {decisions: {enabled: false}}
store: {command_timeout: 2s}
rules:
  - name: api
    match: {path: /api}
    identity: {type: ip}
    limits: [{rate: 2/1h}]
  - name: queued
    match: {path: /queued}
    identity: {type: ip}
    limits: [{algorithm: token_bucket, capacity: 1, refill_rate: 20}]
    on_limit: delay
    max_delay: 10s
  - name: streams
    match: {path: /stream}
    identity: {type: ip}
    limits: [{algorithm: concurrency, limit: 1, slot_ttl: 30s}]
"""


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_plain_admission_is_answered_lean_by_its_headers_alone(store, request):
    """check_asgi_async_lean: an admission at once that holds nothing is answered by the list of
    headers check_asgi_async's decision carries; a denial, a delayed admission and one holding a
    reservation by the RequestDecision itself. On Redis the answer comes from the store's thread."""
    url = request.getfixturevalue("redis").url if store == "redis" else "memory://"
    limiter = Limiter(yaml=LEAN_RULES, store=url)

    def scope(path, peer):
        return {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "headers": [],
                "client": (peer, 1)}

    async def main():
        lean = await limiter.check_asgi_async_lean(scope("/api", "192.0.2.1"))
        full = await limiter.check_asgi_async(scope("/api", "192.0.2.2"))  # another client, the same count
        assert type(lean) is list
        assert lean == full.asgi_headers
        assert [name for name, _ in lean] == [b"ratelimit-policy", b"ratelimit"]
        assert lean[1][1] == b'"api";r=1;t=1800'
        assert await limiter.check_asgi_async_lean(scope("/none", "192.0.2.1")) == []  # no rule applied
        await limiter.check_asgi_async_lean(scope("/api", "192.0.2.1"))
        denied = await limiter.check_asgi_async_lean(scope("/api", "192.0.2.1"))
        assert isinstance(denied, RequestDecision) and not denied.admitted and denied.status == 429
        await limiter.check_asgi_async_lean(scope("/queued", "192.0.2.1"))
        delayed = await limiter.check_asgi_async_lean(scope("/queued", "192.0.2.1"))
        assert isinstance(delayed, RequestDecision) and delayed.admitted and delayed.delay > 0
        held = await limiter.check_asgi_async_lean(scope("/stream", "192.0.2.1"))
        assert isinstance(held, RequestDecision) and held.admitted and held.holds_reservation
        limiter.release(held)

    asyncio.run(main())
    limiter.close()


def test_a_loop_making_its_own_futures_is_asked_for_each():
    """A loop with its own create_future (as uvloop's is) makes every future the module answers
    with; asyncio's own loop gets asyncio.Future made directly."""
    limiter = Limiter(yaml=ASGI_RULES, store="memory://")

    class OwnFutures(asyncio.SelectorEventLoop):
        made = 0

        def create_future(self):
            OwnFutures.made += 1
            return super().create_future()

    async def main():
        scope = {"type": "http", "method": "GET", "path": "/api/a", "headers": [], "client": ("192.0.2.1", 1)}
        decisions = [await limiter.check_asgi_async(scope) for _ in range(3)]
        return [d.admitted for d in decisions]

    loop = OwnFutures()
    try:
        assert loop.run_until_complete(main()) == [True, True, True]
    finally:
        loop.close()
    assert OwnFutures.made == 3
    assert asyncio.run(main()) == [False, False, False]  # the same limit, asyncio's own loop
    limiter.close()


def test_a_client_address_is_one_identity_however_it_is_written():
    """The client's address is read in its canonical form: an IPv4-mapped IPv6 address, the
    same dotted quad, and one IPv6 address in upper and lower case are each one identity; a
    dotted quad with a leading zero is not an address."""
    limiter = Limiter(yaml=ASGI_RULES, store="memory://")  # 3 an hour per IP on GET /api/...
    assert [limiter.check_request("GET", "/api/a", [], client).admitted
            for client in ("::ffff:192.0.2.44", "192.0.2.44", "::FFFF:192.0.2.44", "192.0.2.44")] == [
                True, True, True, False]
    assert [limiter.check_request("GET", "/api/a", [], client).admitted
            for client in ("2001:DB8::7", "2001:db8::7", "2001:0db8:0:0:0:0:0:7", "2001:db8::7")] == [
                True, True, True, False]
    with pytest.raises(ValueError, match="IP address"):
        limiter.check_request("GET", "/api/a", [], "192.0.2.044")
    limiter.close()


def test_the_type_stubs_name_every_public_attribute_of_the_module():
    """python/ratekeeper/_native.pyi against the built module: a class or attribute added to
    one and not the other fails here."""
    import ast

    import ratekeeper._native as native

    stub = ast.parse(open(os.path.join(SOURCE, "python", "ratekeeper", "_native.pyi"), encoding="utf-8").read())
    stubbed = {}
    for node in stub.body:
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            stubbed[node.name] = names
    built = {name: value for name, value in vars(native).items() if isinstance(value, type) and not name.startswith("_")}
    assert set(built) - {"StoreError"} == set(stubbed) - {"StoreError"}
    for name, cls in built.items():
        if name == "StoreError":
            continue
        public = {attr for attr in dir(cls) if not attr.startswith("_")}
        assert public == {attr for attr in stubbed[name] if not attr.startswith("_")}, name
