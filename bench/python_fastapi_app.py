"""An empty FastAPI endpoint, with ratekeeper's middleware (RATEKEEPER_LIMITED=1: every request
checked on RATEKEEPER_STORE, all admitted) or without: what bench/python_fastapi.sh compares."""

import os

from fastapi import FastAPI

app = FastAPI()


@app.get("/empty")
async def empty():
    return {}


if os.environ.get("RATEKEEPER_LIMITED") == "1":
    from ratekeeper.asgi import RateLimiter

    limiter = RateLimiter(yaml="""
logging: {decisions: {enabled: false}}
rules:
  - name: empty
    match: {path: /empty}
    identity: {type: ip}
    limits: [{algorithm: token_bucket, capacity: 1000000000, refill_rate: 1000000}]
""", store=os.environ["RATEKEEPER_STORE"])
    limiter.install(app)
