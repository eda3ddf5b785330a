"""ratekeeper.asgi in a real FastAPI application: the documented app (docs/python/app.py)
under uvicorn with several worker processes sharing a real redis-server, and in process."""

import asyncio
import json
import os
import re
import textwrap
from typing import Optional

import httpx
import pytest

from conftest import SOURCE

CAPACITY = 20

# The documented application's rules with limits a burst can be counted against: no refill
# during a test.
CONFIG = textwrap.dedent(f"""
    store: {{url: "memory://", command_timeout: 200ms}}
    tiers:
      default: free
      levels:
        free: [{{algorithm: token_bucket, capacity: 60, refill_rate: 1}}]
        pro: [{{algorithm: token_bucket, capacity: 600, refill_rate: 10}}]
      users: {{alice: pro}}
    rules:
      - name: api_data
        match: {{methods: [GET], path: /api/data}}
        identity: {{type: ip}}
        limits: [{{algorithm: token_bucket, capacity: {CAPACITY}, refill_rate: 0.001}}]
      - name: api_profile
        match: {{methods: [GET], path: /api/profile}}
        identity: {{type: user_or_ip, header: X-User-ID}}
        tiered: true
      - name: api_items
        match: {{path_prefix: /api/items/}}
        identity: {{type: ip}}
        bucket: per_endpoint
        limits: [{{algorithm: fixed_window, limit: 2, window: 1h}}]
      - name: login
        match: false
        identity: {{type: ip}}
        limits: [{{algorithm: fixed_window, limit: 3, window: 1h}}]
        on_store_error: deny
      - name: ws_echo
        match: {{path: /ws/echo}}
        identity: {{type: ip}}
        limits: [{{algorithm: concurrency, limit: 2, slot_ttl: 2s}}]
""")


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "ratekeeper.yaml"
    path.write_text(CONFIG)
    return str(path)


async def burst(url: str, n: int, headers=None) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        return await asyncio.gather(*[client.get(url, headers=headers) for _ in range(n)])


async def asgi_call(app, kind: str, path: str, client: Optional[str], **scope) -> list[dict]:
    """One request (kind "http") or WebSocket handshake ("websocket") through an ASGI app in
    process, without a body or messages, from `client` (None: a Unix socket's peer): what it
    sent."""
    sent = []

    async def receive():
        return {"type": "http.request"} if kind == "http" else {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    scope = {"type": kind, "path": path, "raw_path": path.encode(), "query_string": b"", "headers": [],
             "client": None if client is None else (client, 1), **scope}
    if kind == "http":
        scope["method"] = "GET"
    await app(scope, receive, send)
    return sent


def test_a_burst_over_several_workers_admits_exactly_the_limit(redis, config, app_factory):
    app = app_factory(config, redis.url, workers=3)
    responses = asyncio.run(burst(f"{app.url}/api/data", 2 * CAPACITY))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * CAPACITY + [429] * CAPACITY, app.output()
    for r in responses:
        assert r.headers["RateLimit-Policy"] == f'"api_data";q={CAPACITY};w=20000'
        if r.status_code == 429:
            assert json.loads(r.content) == {"error": "Rate limit exceeded", "retryAfter": int(r.headers["Retry-After"])}
            assert int(r.headers["Retry-After"]) >= 1
        else:
            assert r.json() == {"data": "success"}
    # The workers share the count in Redis: every worker now denies.
    assert all(r.status_code == 429 for r in asyncio.run(burst(f"{app.url}/api/data", 6)))


def test_identities_tiers_endpoints_and_the_endpoints_own_limits(redis, config, app_factory):
    app = app_factory(config, redis.url, workers=2)
    with httpx.Client(base_url=app.url, timeout=10) as client:
        alice = client.get("/api/profile", headers={"X-User-ID": "alice"})
        assert alice.status_code == 200 and alice.json() == {"profile": {"user": "alice"}}
        assert 'q=600' in alice.headers["RateLimit-Policy"]  # alice's tier: pro
        bob = client.get("/api/profile", headers={"X-User-ID": "bob"})
        assert 'q=60' in bob.headers["RateLimit-Policy"] and 'q=600' not in bob.headers["RateLimit-Policy"]
        # Per endpoint: each item path has its own 2.
        assert [client.get("/api/items/a").status_code for _ in range(3)] == [200, 200, 429]
        assert client.get("/api/items/b").status_code == 200
        # The decorator: 10 a minute per client IP, the seed's body beyond.
        searches = [client.get("/api/search", params={"q": "x"}) for _ in range(11)]
        assert [r.status_code for r in searches] == [200] * 10 + [429]
        assert searches[0].json() == {"results": [], "query": "x"}
        assert searches[10].json()["error"] == "Rate limit exceeded"
        assert "Retry-After" in searches[10].headers
        # The dependency: the file's `login` rule, 3 per IP.
        logins = [client.post("/auth/login") for _ in range(4)]
        assert [r.status_code for r in logins] == [200, 200, 200, 429]
        assert logins[3].json()["error"] == "Rate limit exceeded"
        # Not matched by any rule: untouched.
        untouched = client.get("/openapi.json")
        assert untouched.status_code == 200 and "RateLimit" not in untouched.headers


def test_a_dead_store_is_answered_open_or_closed_as_each_rule_says(redis, config, app_factory):
    app = app_factory(config, redis.url, workers=1)
    with httpx.Client(base_url=app.url, timeout=10) as client:
        assert client.get("/api/data").status_code == 200
        redis.stop()
        assert client.get("/api/data").status_code == 200  # allow (the default): open
        closed = client.post("/auth/login")  # deny: closed
        assert closed.status_code == 429 and "Retry-After" in closed.headers


def test_websocket_handshakes_are_limited_and_hold_their_slots_while_open(redis, config, app_factory):
    """An upgrade is no way around the rules: the documented app's WebSocket endpoint under 2
    workers on one Redis, at most 2 open per IP. The slots outlive their slot_ttl (2 s) while
    the sockets stay open (renewed), and one closed lets the next in."""
    import websockets
    from websockets.exceptions import InvalidStatusCode

    app = app_factory(config, redis.url, workers=2)
    url = f"ws://127.0.0.1:{app.port}/ws/echo"

    async def refused() -> int:
        try:
            async with websockets.connect(url, open_timeout=10):
                return 101
        except InvalidStatusCode as e:
            return e.status_code

    async def main():
        first = await websockets.connect(url, open_timeout=10)
        second = await websockets.connect(url, open_timeout=10)
        assert first.response_headers["RateLimit-Policy"] == '"ws_echo";q=2;w=2'
        await first.send("ping")
        assert await first.recv() == "ping"
        # Refused before the accept: this uvicorn answers a close before the accept with 403.
        assert await refused() == 403
        await asyncio.sleep(3)  # past slot_ttl: the open sockets still hold their slots
        assert await refused() == 403
        await second.send("still open")
        assert await second.recv() == "still open"
        await first.close()
        # Its slot is given back when the endpoint returns: a third connection gets in.
        for _ in range(50):
            try:
                third = await websockets.connect(url, open_timeout=10)
                break
            except InvalidStatusCode:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the closed socket's slot was not given back")
        await third.close()
        await second.close()

    asyncio.run(main())


def test_websocket_endpoints_are_limited_by_the_decorator_and_the_dependency(redis, config, app_factory):
    """@limiter.limit and Depends(limiter.dependency(...)) on WebSocket endpoints, under uvicorn
    with 2 workers on one Redis: the limit holds across workers, and a refused handshake is
    closed before its accept (403 from this uvicorn)."""
    import websockets
    from websockets.exceptions import InvalidStatusCode

    app = app_factory(config, redis.url, workers=2, app_dir=os.path.dirname(__file__), module="websocket_app:app")

    async def attempts(path: str, n: int) -> list:
        out = []
        for _ in range(n):
            try:
                async with websockets.connect(f"ws://127.0.0.1:{app.port}{path}", open_timeout=10) as ws:
                    out.append(await ws.recv())
            except InvalidStatusCode as e:
                out.append(e.status_code)
        return out

    # login: 3 an hour per IP; the decorator: 2 an hour.
    assert asyncio.run(attempts("/ws/dependency", 5)) == ["hello"] * 3 + [403] * 2, app.output()
    assert asyncio.run(attempts("/ws/decorated", 4)) == ["hello"] * 2 + [403] * 2, app.output()


def test_a_refused_handshake_is_a_429_where_the_server_offers_http_responses():
    """ASGI's websocket.http.response extension (newer servers): the refusal is the rejection
    itself, 429 with Retry-After and the seed's body, not a bare close."""
    import ratekeeper
    from ratekeeper.asgi import RateLimitMiddleware

    limiter = ratekeeper.Limiter(yaml="""
logging: {decisions: {enabled: false}}
rules:
  - {name: ws, match: {path: /ws}, identity: {type: ip}, limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}
""")

    async def app(scope, receive, send):
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})

    middleware = RateLimitMiddleware(app, limiter)

    async def handshake(extensions):
        return await asgi_call(middleware, "websocket", "/ws", "192.0.2.9", extensions=extensions)

    async def main():
        accepted = await handshake({})
        assert accepted[0]["type"] == "websocket.accept"
        assert dict(accepted[0]["headers"])[b"ratelimit-policy"] == b'"ws";q=1;w=3600'
        closed = await handshake({})
        assert closed == [{"type": "websocket.close", "code": 1008}]
        start, body = await handshake({"websocket.http.response": {}})
        assert start["type"] == "websocket.http.response.start" and start["status"] == 429
        headers = dict(start["headers"])
        assert int(headers[b"retry-after"]) >= 1
        assert body["type"] == "websocket.http.response.body"
        assert json.loads(body["body"]) == {"error": "Rate limit exceeded", "retryAfter": int(headers[b"retry-after"])}

    asyncio.run(main())
    limiter.close()


def test_the_middleware_in_process_with_starlettes_client(tmp_path):
    """The same application in this process (memory store), driven through httpx's ASGI
    transport: no server, no Redis."""
    import importlib.util

    path = tmp_path / "ratekeeper.yaml"
    path.write_text(CONFIG)
    os.environ["RATEKEEPER_CONFIG"] = str(path)
    os.environ.pop("RATEKEEPER_STORE", None)
    spec = importlib.util.spec_from_file_location("documented_app", os.path.join(SOURCE, "docs", "python", "app.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    async def main():
        transport = httpx.ASGITransport(app=module.app, client=("192.0.2.5", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            statuses = [(await client.get("/api/data")).status_code for _ in range(CAPACITY + 1)]
            bad = await client.get("/api/items/%zz")
            return statuses, bad

    statuses, bad = asyncio.run(main())
    assert statuses == [200] * CAPACITY + [429]
    assert bad.status_code == 400 and bad.json()["error"] == "Bad request"
    module.limiter.close()


def test_declaring_a_limit_after_the_limiter_opened_is_refused():
    from ratekeeper.asgi import RateLimiter

    limiter = RateLimiter(yaml="rules: []")
    limiter.open()
    with pytest.raises(RuntimeError, match="before the limiter opens"):
        limiter.limit("5/minute")(lambda: None)
    with pytest.raises(ValueError, match="100/minute"):
        limiter.limit("lots")
    with pytest.raises(ValueError, match="key must be"):
        limiter.limit("5/minute", key="cookie")
    limiter.close()


def test_the_documentation_shows_the_files_as_they_are():
    """docs/python.md: each block marked <!-- file: PATH --> is that file, whole."""
    text = open(os.path.join(SOURCE, "docs", "python.md"), encoding="utf-8").read()
    blocks = re.findall(r"<!-- file: (\S+) -->\n(?:<!-- yaml: [^>]*-->\n)?```\w*\n(.*?)```\n", text, re.S)
    assert sorted(path for path, _ in blocks) == ["docs/python/app.py", "docs/python/ratekeeper.yaml"]
    for path, block in blocks:
        assert block == open(os.path.join(SOURCE, path), encoding="utf-8").read(), path


def test_a_forwarded_address_counts_only_from_a_trusted_proxy(redis, tmp_path, app_factory):
    path = tmp_path / "ratekeeper.yaml"
    path.write_text(CONFIG.replace("rules:", "trusted_proxies: [127.0.0.1/32]\nrules:", 1))
    app = app_factory(str(path), redis.url, workers=1)
    with httpx.Client(base_url=app.url, timeout=10) as client:
        for _ in range(CAPACITY):
            assert client.get("/api/data", headers={"X-Forwarded-For": "198.51.100.1"}).status_code == 200
        assert client.get("/api/data", headers={"X-Forwarded-For": "198.51.100.1"}).status_code == 429
        # Another client behind the same proxy has its own budget.
        assert client.get("/api/data", headers={"X-Forwarded-For": "198.51.100.2"}).status_code == 200


def test_behind_a_proxy_on_a_unix_socket_the_client_is_the_proxys_report():
    """A Unix socket's peer has no address (scope["client"] is None): with `unix` trusted, the
    client is the rightmost X-Forwarded-For entry; without it, a 400 that says what to do."""
    import ratekeeper
    from ratekeeper.asgi import RateLimitMiddleware

    rules = """
logging: {decisions: {enabled: false}}
rules:
  - {name: api, match: {path: /api}, identity: {type: ip}, limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}
"""

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def status(middleware, forwarded_for):
        sent = await asgi_call(middleware, "http", "/api", None, headers=[(b"x-forwarded-for", forwarded_for)])
        return sent[0]["status"], sent[-1]["body"]

    trusted = ratekeeper.Limiter(yaml="trusted_proxies: [unix]\n" + rules)
    untrusted = ratekeeper.Limiter(yaml=rules)

    async def main():
        behind = RateLimitMiddleware(app, trusted)
        assert (await status(behind, b"198.51.100.1"))[0] == 200
        assert (await status(behind, b"6.6.6.6, 198.51.100.1"))[0] == 429  # the proxy's report counts
        assert (await status(behind, b"198.51.100.2"))[0] == 200  # another client, its own budget
        assert (await status(behind, b""))[0] == 400
        code, body = await status(RateLimitMiddleware(app, untrusted), b"198.51.100.1")
        assert code == 400 and b"add 'unix' to trusted_proxies" in body

    asyncio.run(main())
    trusted.close()
    untrusted.close()


def test_a_usage_cost_is_settled_and_a_slot_held_until_the_response_ends():
    """Rules that end after the response, through the middleware in process: a `usage` rule
    settled to the cost the response header reports, and a concurrency slot held while the
    application answers and given back when it has."""
    from ratekeeper.asgi import RateLimitMiddleware

    import ratekeeper

    limiter = ratekeeper.Limiter(yaml="""
logging: {decisions: {enabled: false}}
rules:
  - name: tokens
    match: {path: /complete}
    identity: {type: ip}
    limits: [{algorithm: fixed_window, limit: 100, window: 1h}]
    usage: {response_header: X-Usage-Tokens, estimate: 10}
  - name: streams
    match: {path: /stream}
    identity: {type: ip}
    limits: [{algorithm: concurrency, limit: 1, slot_ttl: 30s}]
""")
    release = asyncio.Event()

    async def app(scope, receive, send):
        if scope["path"] == "/stream":
            await release.wait()
        headers = [(b"x-usage-tokens", b"30")] if scope["path"] == "/complete" else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = RateLimitMiddleware(app, limiter)

    async def request(path):
        sent = await asgi_call(middleware, "http", path, "192.0.2.8")
        return sent[0]["status"], dict(sent[0]["headers"])

    async def main():
        status, headers = await request("/complete")
        assert status == 200 and b"ratelimit" in headers
        first = asyncio.create_task(request("/stream"))
        await asyncio.sleep(0.05)
        assert (await request("/stream"))[0] == 429  # the one slot is held
        release.set()
        assert (await first)[0] == 200
        assert (await request("/stream"))[0] == 200  # given back when the response ended

    asyncio.run(main())
    # 30 settled, not the estimate of 10.
    assert limiter.check("tokens", "ip:192.0.2.8", 0).remaining == 70
    limiter.close()


def test_rules_built_in_python_join_the_files():
    from ratekeeper.asgi import RateLimiter

    limiter = RateLimiter(yaml="rules: [{name: from_file, match: false, limits: [{rate: 5/1h}]}]",
                          rules=[{"name": "built", "match": False, "identity": {"type": "ip"},
                                  "limits": [{"algorithm": "fixed_window", "limit": 2, "window": "1h"}]}])
    assert limiter.limiter.rules == ["from_file", "built"]
    assert [limiter.limiter.check("built", "ip:192.0.2.1").allowed for _ in range(3)] == [True, True, False]
    limiter.close()
    with pytest.raises(ValueError, match="also in the file"):
        RateLimiter(yaml="rules: [{name: a, limits: [{rate: 5/1h}]}]", rules=[{"name": "a"}]).open()
    with pytest.raises(ValueError, match=r"rules\[1\]\.limits"):
        RateLimiter(yaml="rules: [{name: a, limits: [{rate: 5/1h}]}]", rules=[{"name": "b"}]).open()


def test_a_dependency_without_install_still_answers_429():
    from fastapi import Depends, FastAPI

    from ratekeeper.asgi import RateLimiter

    limiter = RateLimiter(yaml="rules: [{name: once, match: false, limits: [{algorithm: fixed_window, limit: 1, window: 1h}]}]")
    app = FastAPI()

    @app.get("/once", dependencies=[Depends(limiter.dependency("once"))])
    async def once():
        return {"ok": True}

    async def main():
        transport = httpx.ASGITransport(app=app, client=("192.0.2.6", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            return [await client.get("/once") for _ in range(2)]

    first, second = asyncio.run(main())
    assert first.status_code == 200
    assert second.status_code == 429 and "Retry-After" in second.headers
    limiter.close()
