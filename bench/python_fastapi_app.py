"""An empty FastAPI endpoint, with ratekeeper's middleware (RATEKEEPER_LIMITED=1: every request
checked on RATEKEEPER_STORE, all admitted), with the seed's own middleware (RATEKEEPER_LIMITED=
seed: its class, bench/seed_limiter.py, through redis-py on the same Redis), with a middleware
that only adds the two RateLimit header fields ratekeeper's adds here, constant, and decides
nothing (RATEKEEPER_LIMITED=headers: what any middleware sending them costs), or without: what
bench/python_fastapi.sh compares."""

import os

from fastapi import FastAPI

app = FastAPI()

# One rule on the endpoint whose limit nothing reaches: every request checked and admitted.
RULES = """
logging: {decisions: {enabled: false}}
rules:
  - name: empty
    match: {path: /empty}
    identity: {type: ip}
    limits: [{algorithm: token_bucket, capacity: 1000000000, refill_rate: 1000000}]
"""


@app.get("/empty")
async def empty():
    return {}


if os.environ.get("RATEKEEPER_LIMITED") == "1":
    from ratekeeper.asgi import RateLimiter

    limiter = RateLimiter(yaml=RULES, store=os.environ["RATEKEEPER_STORE"])
    limiter.install(app)


if os.environ.get("RATEKEEPER_LIMITED") == "seed":
    import sys

    from fastapi import Request
    from fastapi.responses import JSONResponse
    from redis import Redis

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from seed_limiter import TokenBucketRateLimiter

    seed = TokenBucketRateLimiter(redis_client=Redis.from_url(os.environ["RATEKEEPER_STORE"]),
                                  capacity=1000000000, refill_rate=1000000)

    @app.middleware("http")
    async def seed_rate_limit(request: Request, call_next):
        if not seed.allow_request(f"ip:{request.client.host}"):
            return JSONResponse(status_code=429, content={"error": "Rate limit exceeded", "retryAfter": 10},
                                headers={"Retry-After": "10"})
        return await call_next(request)


if os.environ.get("RATEKEEPER_LIMITED") == "headers":
    # The fields ratekeeper's middleware adds to this endpoint's responses, as it words them.
    FIELDS = [(b"ratelimit-policy", b'"empty";q=1000000000;w=1000'), (b"ratelimit", b'"empty";r=999999999;t=1')]

    class HeadersOnly:
        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                await self.app(scope, receive, send)
                return

            def send_headed(message):
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", ()), *FIELDS]}
                return send(message)

            await self.app(scope, receive, send_headed)

    app.add_middleware(HeadersOnly)
