"""Rate limiting for ASGI applications (FastAPI, Starlette) on ratekeeper's limiter.

    from fastapi import Depends, FastAPI
    from ratekeeper.asgi import RateLimiter

    limiter = RateLimiter("ratekeeper.yaml")   # or RateLimiter(yaml=..., store="redis://...")
    app = FastAPI()
    limiter.install(app)   # every request through the configuration's rules (`match`)

    @app.get("/search")
    @limiter.limit("10/minute")            # one endpoint's own limit, per client IP
    async def search(q: str): ...

    @app.post("/login", dependencies=[Depends(limiter.dependency("login"))])
    async def login(): ...                  # a rule of the file, as a dependency

A request over a limit is answered 429 with `Retry-After`, the RateLimit headers and the
seed's body, {"error": "Rate limit exceeded", "retryAfter": N}; an admitted one gets the
RateLimit headers on its response. Identities (client IP behind `trusted_proxies`, user and
API key headers), tiers, per-endpoint buckets and each rule's failure policy (fail open or
closed when the store is down) are the configuration's, decided by the C++ limiter: the
event loop never waits on the store.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import threading
from typing import Any, Awaitable, Callable, Optional

from ratekeeper._native import Decision, Limiter, RequestDecision

__all__ = ["RateLimiter", "RateLimitMiddleware", "RateLimitExceeded"]

Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

_UNITS = {
    "s": "s", "sec": "s", "second": "s", "seconds": "s",
    "m": "m", "min": "m", "minute": "m", "minutes": "m",
    "h": "h", "hour": "h", "hours": "h",
    "d": "24h", "day": "24h", "days": "24h",
}
# A WebSocket refused before its accept is closed with this code (RFC 6455: policy violation).
_POLICY_VIOLATION = 1008
_RATE = re.compile(r"^\s*(\d+)\s*(?:/|per)\s*(\d*)\s*([a-z]+)\s*$")


def _rate(text: str) -> str:
    """'100/minute', '10 per second', '5/10s' as the configuration's rate ('100/1m')."""
    m = _RATE.match(text.lower())
    if not m or m.group(3) not in _UNITS:
        raise ValueError(f"a rate is '<count>/<period>' such as 100/minute or 5/10s, got {text!r}")
    count, times, unit = int(m.group(1)), m.group(2), _UNITS[m.group(3)]
    if count <= 0:
        raise ValueError(f"a rate's count must be > 0, got {text!r}")
    if unit == "24h":
        return f"{count}/{24 * int(times or 1)}h"
    return f"{count}/{times or 1}{unit}"


def _with_headers(message: dict, added: list[tuple[bytes, bytes]]) -> dict:
    """`message` (a response's start, a WebSocket's accept) with `added` after its headers."""
    return {**message, "headers": [*message.get("headers", ()), *added]}


def _rejection(status: int, body: bytes, content_type: str, headers: list[tuple[bytes, bytes]]) -> tuple[dict, dict]:
    out = [*headers, (b"content-type", (content_type or "application/json").encode("latin-1")),
           (b"content-length", str(len(body)).encode("latin-1"))]
    return ({"type": "http.response.start", "status": status, "headers": out},
            {"type": "http.response.body", "body": body})


try:  # Starlette's, so that an application without RateLimiter.install still answers 429
    from starlette.exceptions import HTTPException as _Base
except ImportError:  # pragma: no cover - a plain ASGI application
    _Base = Exception  # type: ignore[misc, assignment]


class RateLimitExceeded(_Base):  # type: ignore[misc, valid-type]
    """Raised by a dependency when its rule denies the request: answered 429 with the seed's
    body by the handler RateLimiter.install adds (Starlette's own handler, without it: 429,
    the headers, {"detail": ...})."""

    def __init__(self, decision: Decision):
        message = f"rate limit exceeded: rule {decision.rule!r}, retry after {decision.retry_after:.3f} s"
        if _Base is Exception:
            super().__init__(message)
        else:
            super().__init__(status_code=429, detail="Rate limit exceeded", headers=dict(decision.headers))
        self.message = message
        self.decision = decision


class RateLimiter:
    """A ratekeeper Limiter for one application: the configuration's rules, plus the limits
    its endpoints declare with `limit()`. The native limiter is built on first use (so that
    every decorator has registered its limit), or by `open()`."""

    def __init__(self, config: Optional[str] = None, *, yaml: Optional[str] = None, store: Optional[str] = None,
                 threads: int = 1, rules: Optional[list[dict]] = None):
        """`rules`: rules built in Python, as the configuration writes them (dicts of name,
        match, identity, limits...), added to the file's."""
        if config is not None and yaml is not None:
            raise ValueError("give either a configuration file or yaml")
        self._config = config
        self._yaml = yaml
        self._store = store
        self._threads = threads
        self._extra: list[dict] = [dict(rule) for rule in rules or []]
        self._limiter: Optional[Limiter] = None
        self._lock = threading.Lock()

    # The limiter --------------------------------------------------------------------------

    @property
    def limiter(self) -> Limiter:
        limiter = self._limiter
        return limiter if limiter is not None else self.open()

    def open(self) -> Limiter:
        """Builds the native limiter (once): the configuration with the endpoints' limits added."""
        with self._lock:
            if self._limiter is None:
                self._limiter = self._build()
            return self._limiter

    def _build(self) -> Limiter:
        if not self._extra:
            if self._config is not None:
                return Limiter(self._config, store=self._store, threads=self._threads)
            return Limiter(yaml=self._yaml or "", store=self._store, threads=self._threads)
        import yaml as pyyaml  # python3-yaml: only to add the endpoints' rules to the document

        source = self._config or "<yaml>"
        text = open(self._config, encoding="utf-8").read() if self._config is not None else (self._yaml or "")
        document = pyyaml.safe_load(text) or {}
        if not isinstance(document, dict):
            raise ValueError(f"{source}: the document must be a mapping of sections")
        rules = document.setdefault("rules", []) or []
        if not isinstance(rules, list):
            raise ValueError(f"{source}: rules: must be a list")
        taken = {r.get("name") for r in rules if isinstance(r, dict)}
        for rule in self._extra:
            if rule.get("name") in taken:
                raise ValueError(f"{source}: rule {rule.get('name')!r} (built in Python) is also in the file")
        document["rules"] = rules + self._extra
        return Limiter(yaml=pyyaml.safe_dump(document, sort_keys=False), store=self._store, threads=self._threads,
                       source=source)

    def close(self) -> None:
        with self._lock:
            if self._limiter is not None:
                self._limiter.close()

    # Whole application ---------------------------------------------------------------------

    def install(self, app: Any) -> None:
        """Every request of `app` through the configuration's rules (RateLimitMiddleware), the
        handler of RateLimitExceeded, and the limiter closed at shutdown."""
        app.add_middleware(RateLimitMiddleware, limiter=self)
        if hasattr(app, "add_exception_handler"):
            app.add_exception_handler(RateLimitExceeded, self._exceeded)
        if hasattr(app, "add_event_handler"):
            app.add_event_handler("startup", self.open)
            app.add_event_handler("shutdown", self.close)

    async def _exceeded(self, request: Any, exc: RateLimitExceeded) -> Any:
        from starlette.responses import Response

        return Response(exc.decision.body, status_code=429, media_type="application/json",
                        headers=dict(exc.decision.headers))

    # One endpoint ---------------------------------------------------------------------------

    def limit(self, rate: str, *, key: str = "ip", header: str = "X-User-ID", name: Optional[str] = None,
              per_endpoint: bool = False) -> Callable:
        """A decorator: the endpoint's own limit, `rate` as '100/minute' (a token bucket of
        that capacity refilled at that rate), per client IP (`key="ip"`), per user (`"user"`:
        the `header`, the IP without it) or per API key (`"api_key"`: the `header` hashed)."""
        kinds = {"ip": {"type": "ip"}, "user": {"type": "user_or_ip", "header": header},
                 "api_key": {"type": "api_key", "header": header}}
        if key not in kinds:
            raise ValueError(f"key must be one of {sorted(kinds)}, got {key!r}")
        limit = {"rate": _rate(rate)}

        def decorator(endpoint: Callable) -> Callable:
            rule_name = name or re.sub(r"[^A-Za-z0-9_.-]", "_", f"{endpoint.__module__}.{endpoint.__qualname__}")[-64:]
            # match: false: the middleware leaves it to this endpoint.
            rule: dict = {"name": rule_name, "match": False, "identity": kinds[key], "limits": [limit]}
            if per_endpoint:
                rule["bucket"] = "per_endpoint"
            if self._limiter is not None:
                raise RuntimeError("limits are declared before the limiter opens (at import, not per request)")
            self._extra.append(rule)
            return self._guarded(endpoint, rule_name)

        return decorator

    def dependency(self, rule: str) -> Callable:
        """A FastAPI dependency checking the configuration's rule `rule` for the request or
        WebSocket (its identity as the rule resolves it). Denied, a request raises
        RateLimitExceeded (429); a WebSocket is closed before its accept (code 1008)."""

        async def check_rule(connection: Any) -> Decision:
            decision = await self._check(rule, connection.scope)
            connection.state.ratekeeper = decision
            if not decision.allowed:
                if connection.scope["type"] == "websocket":
                    from starlette.exceptions import WebSocketException

                    raise WebSocketException(code=_POLICY_VIOLATION, reason="Rate limit exceeded")
                raise RateLimitExceeded(decision)
            return decision

        from starlette.requests import HTTPConnection

        check_rule.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("connection", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=HTTPConnection)],
            return_annotation=Decision)
        return check_rule

    def _check(self, rule: str, scope: Scope) -> Awaitable[Decision]:
        return self.limiter.check_rule_asgi_async(rule, scope)

    def _guarded(self, endpoint: Callable, rule: str) -> Callable:
        """The endpoint behind its rule: FastAPI gives the wrapper the request or WebSocket (a
        parameter added to the endpoint's signature); denied, the wrapper answers 429 itself,
        or closes the WebSocket before its accept (code 1008)."""
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import HTTPConnection
        from starlette.responses import Response

        # Annotations resolved in the endpoint's module (FastAPI reads the wrapper's).
        signature = inspect.signature(endpoint, eval_str=True)
        parameter = "ratekeeper_request"
        is_async = inspect.iscoroutinefunction(endpoint)
        keeps_request = parameter in signature.parameters

        @functools.wraps(endpoint)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            request = kwargs[parameter] if keeps_request else kwargs.pop(parameter)
            decision = await self._check(rule, request.scope)
            if not decision.allowed:
                if request.scope["type"] == "websocket":
                    await request.close(code=_POLICY_VIOLATION)
                    return None
                return Response(decision.body, status_code=429, media_type="application/json",
                                headers=dict(decision.headers))
            if is_async:
                return await endpoint(*args, **kwargs)
            return await run_in_threadpool(endpoint, *args, **kwargs)

        parameters = list(signature.parameters.values())
        if not keeps_request:
            parameters.append(inspect.Parameter(parameter, inspect.Parameter.KEYWORD_ONLY, annotation=HTTPConnection))
        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return wrapper


class RateLimitMiddleware:
    """ASGI middleware: each HTTP request and WebSocket handshake decided by the limiter (the
    configuration's rules and their `match`) before the application sees it. `limiter`: a
    RateLimiter or a Limiter."""

    def __init__(self, app: Callable, limiter: RateLimiter | Limiter):
        self.app = app
        self._limiter = limiter
        self._opened: Optional[Limiter] = limiter if isinstance(limiter, Limiter) else None

    def _native(self) -> Limiter:
        if self._opened is None:
            self._opened = self._limiter.limiter  # type: ignore[union-attr]
        return self._opened

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)  # lifespan
            return
        limiter = self._opened or self._native()
        # A WebSocket's handshake is a GET: decided as one, so that an upgrade is no way around
        # the rules; a concurrency limit holds its slot while the connection is open. An
        # admission at once that holds nothing (the common answer) comes as the list of
        # headers to add alone; any other answer as a RequestDecision.
        answer = await limiter.check_asgi_async_lean(scope)
        first = "http.response.start" if kind == "http" else "websocket.accept"
        if answer.__class__ is not list:
            decision: RequestDecision = answer
            if not decision.admitted:
                start, body = _rejection(decision.status, decision.body, decision.content_type, decision.asgi_headers)
                if kind == "websocket":
                    await _refuse_websocket(scope, start, body, send)
                else:
                    await send(start)
                    await send(body)
                return
            if decision.delay > 0:
                await asyncio.sleep(decision.delay)
            if decision.holds_reservation:
                await self._holding(decision, limiter, first, scope, receive, send)
                return
            answer = decision.asgi_headers
        added: list[tuple[bytes, bytes]] = answer
        if not added:  # no rule applied
            await self.app(scope, receive, send)
            return

        # A plain function handing on send's awaitable: no coroutine of its own per message.
        def send_headed(message: dict) -> Awaitable[None]:
            return send(_with_headers(message, added) if message["type"] == first else message)

        await self.app(scope, receive, send_headed)

    async def _holding(self, decision: RequestDecision, limiter: Limiter, first: str, scope: Scope, receive: Receive,
                       send: Send) -> None:
        """The application behind an admission holding a reservation, given back when the
        request ends: settled to the cost its response header reports (a `usage` rule), or
        released (concurrency slots)."""
        added = decision.asgi_headers
        usage_header = decision.usage_header.lower().encode("latin-1")
        reported: list[Optional[bytes]] = [None]

        async def send_with_headers(message: dict) -> None:
            if message["type"] == first:
                if usage_header:
                    for name, value in message.get("headers", []):
                        if name.lower() == usage_header:
                            reported[0] = value
                if added:
                    message = _with_headers(message, added)
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            if usage_header:
                limiter.settle_from_header(decision, None if reported[0] is None else reported[0].decode("latin-1"))
            else:
                limiter.release(decision)


async def _refuse_websocket(scope: Scope, start: dict, body: dict, send: Send) -> None:
    """A refused handshake: the rejection itself (429, Retry-After, the body) where the server
    offers ASGI's `websocket.http.response` extension; otherwise a close before the accept,
    which the server answers 403."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send({**start, "type": "websocket.http.response.start"})
        await send({**body, "type": "websocket.http.response.body"})
    else:
        await send({"type": "websocket.close", "code": _POLICY_VIOLATION})
