"""The seed's FastAPI application, with its rate limiting taken out: ratekeeper does it.

Run it behind the ratekeeper proxy (docs/recipes.md):

    uvicorn seed_app:app --port 8000
    ratekeeper serve --config proxy.yaml     # upstream: {url: http://127.0.0.1:8000}

`GET /_recipe/hits` says how many requests reached each route (the recipes' tests use it
to prove that denied requests never reach the application).
"""

from collections import Counter

from fastapi import FastAPI, Request

app = FastAPI()
hits: Counter = Counter()


@app.get("/api/data")
async def get_data():
    hits["/api/data"] += 1
    return {"data": "success"}


@app.get("/api/profile")
async def get_profile(request: Request):
    hits["/api/profile"] += 1
    user_id = request.headers.get("X-User-ID", "anonymous")
    return {"profile": {"user": user_id}}


@app.post("/api/echo")
async def echo(request: Request):
    hits["/api/echo"] += 1
    body = await request.body()
    return {"bytes": len(body), "forwarded_for": request.headers.get("X-Forwarded-For")}


@app.get("/_recipe/hits")
async def get_hits():
    return dict(hits)
