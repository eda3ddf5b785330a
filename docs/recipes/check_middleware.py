"""A Starlette (FastAPI) middleware that asks ratekeeper's decision API about each request.

For applications that call ratekeeper rather than sit behind its proxy: the middleware sends
the request's method, path, headers and client address to `POST /v1/check`, which evaluates
the configured rules exactly as the proxy would, and answers with the decision and the
headers to send. A denial becomes the seed's 429; the RateLimit headers are added to every
response. When ratekeeper cannot be reached, `fail_open` decides (the seed's fail-open by
default), and the outage is logged, never mistaken for a denial.

    app = FastAPI()
    app.add_middleware(RatekeeperMiddleware, url="http://127.0.0.1:8080")
"""

import json
import logging
import urllib.error
import urllib.request

from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

log = logging.getLogger("ratekeeper")


class RatekeeperMiddleware(BaseHTTPMiddleware):
    def __init__(self, app, url: str, timeout: float = 0.5, fail_open: bool = True):
        super().__init__(app)
        self.endpoint = url.rstrip("/") + "/v1/check"
        self.timeout = timeout
        self.fail_open = fail_open

    def _check(self, request) -> dict:
        payload = {
            "request": {
                "method": request.method,
                "path": request.url.path + (("?" + request.url.query) if request.url.query else ""),
                "headers": {k: v for k, v in request.headers.items()},
            }
        }
        if request.client and request.client.host:
            payload["request"]["client_ip"] = request.client.host
        req = urllib.request.Request(
            self.endpoint,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:  # 429 carries the decision too
            if e.code == 429:
                return json.load(e)
            raise

    async def dispatch(self, request, call_next):
        try:
            answer = await run_in_threadpool(self._check, request)
        except Exception as e:  # ratekeeper unreachable, timed out, or answered 4xx/5xx
            log.warning("ratekeeper decision API unavailable: %s", e)
            if self.fail_open:
                return await call_next(request)
            return JSONResponse({"error": "Rate limiter unavailable"}, status_code=503)
        headers = answer.get("headers", {})
        if not answer.get("allowed", True):
            retry_after = int(headers.get("Retry-After", "1"))
            return JSONResponse(
                {"error": "Rate limit exceeded", "retryAfter": retry_after},
                status_code=429,
                headers=headers,
            )
        response = await call_next(request)
        for name, value in headers.items():
            response.headers[name] = value
        return response
