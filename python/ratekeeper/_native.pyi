from typing import Any, Awaitable, Iterable, Optional, Sequence, Tuple, Union

_Header = Tuple[Union[str, bytes], Union[str, bytes]]

class StoreError(RuntimeError):
    """The store failed and no failure policy answered."""

class Decision:
    """One check of a rule for an identity."""

    @property
    def allowed(self) -> bool: ...
    @property
    def limit(self) -> int: ...
    @property
    def remaining(self) -> int: ...
    @property
    def retry_after(self) -> float:
        """Seconds until the request could be admitted; 0 when allowed."""
    @property
    def reset_after(self) -> float:
        """Seconds until the limit is full again."""
    @property
    def by_failure_policy(self) -> bool:
        """The store failed and the rule's failure policy answered."""
    @property
    def rule(self) -> str: ...
    @property
    def identity(self) -> str: ...
    @property
    def headers(self) -> list[tuple[str, str]]:
        """RateLimit-Policy, RateLimit (and Retry-After when denied), as configured."""
    @property
    def body(self) -> bytes:
        """Denied: the 429's body, {"error": "Rate limit exceeded", "retryAfter": N}; empty when allowed."""
    def __bool__(self) -> bool: ...

class RequestDecision:
    """The answer to an HTTP request, as the ratekeeper server gives it."""

    @property
    def admitted(self) -> bool: ...
    @property
    def status(self) -> int:
        """200 admitted, 429 rate limited, 400 a request the rules cannot read, 500."""
    @property
    def body(self) -> bytes:
        """The JSON body of a rejection; empty when admitted."""
    @property
    def content_type(self) -> str: ...
    @property
    def headers(self) -> list[tuple[str, str]]:
        """To add to the response, admitted or not."""
    @property
    def asgi_headers(self) -> list[tuple[bytes, bytes]]:
        """The same headers as ASGI sends them: bytes, names in lower case."""
    @property
    def delay(self) -> float:
        """Admitted, to be served after this many seconds (on_limit: delay)."""
    @property
    def rule(self) -> str: ...
    @property
    def holds_reservation(self) -> bool:
        """The request holds a reservation: release (or settle) it when it ends."""
    @property
    def usage_header(self) -> str:
        """The response header whose integer settles the reservation (a `usage` rule); "" for none."""

class Limiter:
    def __init__(
        self,
        config: Optional[str] = None,
        *,
        yaml: Optional[str] = None,
        store: Optional[str] = None,
        threads: int = 1,
        source: str = "<yaml>",
    ) -> None:
        """A configuration file, or its text as `yaml` (named `source` in errors); `store`
        replaces its store URL; `threads` run the store's event loop.

        Raises ValueError naming the file, field and reason of an invalid configuration."""
    def check(self, rule: str, identity: str, cost: int = 1, *, tier: str = "", parent: str = "") -> Decision: ...
    def check_async(
        self, rule: str, identity: str, cost: int = 1, *, tier: str = "", parent: str = ""
    ) -> Awaitable[Decision]: ...
    def check_many(self, rule: str, identities: Sequence[str], cost: int = 1, *, tier: str = "") -> list[Decision]:
        """One decision per identity, each on its own (not all-or-nothing), sent together."""
    def check_many_async(
        self, rule: str, identities: Sequence[str], cost: int = 1, *, tier: str = ""
    ) -> Awaitable[list[Decision]]: ...
    def check_rule_request(
        self, rule: str, method: str, path: str, headers: Iterable[_Header], client: str
    ) -> Decision: ...
    def check_rule_request_async(
        self, rule: str, method: str, path: str, headers: Iterable[_Header], client: str
    ) -> Awaitable[Decision]: ...
    def check_request(self, method: str, path: str, headers: Iterable[_Header], client: str) -> RequestDecision: ...
    def check_request_async(
        self, method: str, path: str, headers: Iterable[_Header], client: str
    ) -> Awaitable[RequestDecision]: ...
    def check_asgi_async(self, scope: dict[str, Any]) -> Awaitable[RequestDecision]:
        """check_request_async of an ASGI scope (http or websocket: a handshake is a GET): its
        raw_path (else path) and query_string as received, headers, and client (None: a Unix
        socket's peer)."""
    def check_asgi_async_lean(self, scope: dict[str, Any]) -> Awaitable[Union[list[tuple[bytes, bytes]], RequestDecision]]:
        """check_asgi_async, but an admission at once that holds nothing (no delay, no
        reservation: the common answer) is answered by its asgi_headers list alone."""
    def check_rule_asgi_async(self, rule: str, scope: dict[str, Any]) -> Awaitable[Decision]:
        """check_rule_request_async of an ASGI scope, read as check_asgi_async reads it."""
    def release(self, decision: RequestDecision) -> None: ...
    def settle(self, decision: RequestDecision, cost: int) -> None: ...
    def settle_from_header(self, decision: RequestDecision, value: Optional[str]) -> None: ...
    def close(self) -> None: ...
    def refresh_overrides(self) -> None:
        """Reads the per-identity overrides again now (they are read every overrides.refresh)."""
    def set_override(self, rule: str, identity: str, factor: float, note: str = "") -> bool:
        """Multiplies an identity's limits under a rule, on every instance sharing the store;
        answers whether it replaced one."""
    def remove_override(self, rule: str, identity: str) -> bool: ...
    def override_factor(self, rule: str, identity: str) -> float:
        """The factor in effect in this process (1.0: none)."""
    def metrics(self) -> str: ...
    @property
    def rules(self) -> list[str]: ...
    @property
    def ready(self) -> bool: ...
    @property
    def store_kind(self) -> str: ...
