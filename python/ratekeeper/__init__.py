"""ratekeeper in process: the C++ limiter, configured by ratekeeper's YAML.

    from ratekeeper import Limiter

    limiter = Limiter("ratekeeper.yaml")              # or Limiter(yaml="...", store="redis://...")
    decision = limiter.check("api", "user:42")         # blocks this thread (not the GIL)
    decision = await limiter.check_async("api", "user:42")  # asyncio: the loop never blocks

A decision carries `allowed`, `limit`, `remaining`, `retry_after` and `reset_after` (seconds)
and `headers`, the rate-limit headers to send. `check_request` / `check_request_async` decide
on an HTTP request as the ratekeeper server does (the configuration's rules, matches,
identities, tiers and trusted proxies). `ratekeeper.asgi` is the middleware for FastAPI and
Starlette.
"""

from ratekeeper._native import Decision, Limiter, RequestDecision, StoreError

__all__ = ["Decision", "Limiter", "RequestDecision", "StoreError"]
