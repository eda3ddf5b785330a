"""The seed's application protected by RatekeeperMiddleware (check_middleware.py): each request
is decided by ratekeeper's `POST /v1/check` before it reaches a route.

    RATEKEEPER_URL=http://127.0.0.1:8080 uvicorn checked_app:app --port 8000
"""

import os

from check_middleware import RatekeeperMiddleware
from seed_app import app

app.add_middleware(
    RatekeeperMiddleware,
    url=os.environ.get("RATEKEEPER_URL", "http://127.0.0.1:8080"),
    timeout=float(os.environ.get("RATEKEEPER_TIMEOUT", "0.5")),
)
