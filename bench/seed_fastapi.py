"""The seed's FastAPI application with the seed's own rate limiting: its HTTP middleware
asking the seed's limiter (bench/seed_limiter.py) on Redis about every request, in front of
the routes of docs/recipes/seed_app.py. What ratekeeper replaces, as a row of
bench/http_wrk.sh:

    SEED_REDIS_URL=redis://127.0.0.1:6379 SEED_CAPACITY=100 SEED_REFILL_RATE=10 \
      /usr/bin/python3 -m uvicorn --app-dir bench seed_fastapi:app --port 8000
"""

import os
import sys

from fastapi import Request
from fastapi.responses import JSONResponse
from redis import Redis

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "recipes"))

from seed_app import app  # noqa: E402
from seed_limiter import TokenBucketRateLimiter  # noqa: E402

limiter = TokenBucketRateLimiter(
    redis_client=Redis.from_url(os.environ.get("SEED_REDIS_URL", "redis://localhost:6379")),
    capacity=int(os.environ.get("SEED_CAPACITY", "100")),
    refill_rate=float(os.environ.get("SEED_REFILL_RATE", "10")),
)


@app.middleware("http")
async def rate_limit_middleware(request: Request, call_next):
    client_ip = request.client.host
    if not limiter.allow_request(f"ip:{client_ip}"):
        return JSONResponse(
            status_code=429,
            content={"error": "Rate limit exceeded", "retryAfter": 10},
            headers={"Retry-After": "10"},
        )
    return await call_next(request)
