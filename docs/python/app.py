"""The seed's FastAPI application, rate limited in process by ratekeeper (docs/python.md).

    RATEKEEPER_STORE=redis://127.0.0.1:6379 uvicorn --app-dir docs/python app:app --workers 4 --no-proxy-headers

The limits are docs/python/ratekeeper.yaml's (RATEKEEPER_CONFIG names another file), shared
by every worker through the store.
"""

import os

from fastapi import Depends, FastAPI, Request, WebSocket, WebSocketDisconnect

from ratekeeper.asgi import RateLimiter

here = os.path.dirname(os.path.abspath(__file__))
limiter = RateLimiter(os.environ.get("RATEKEEPER_CONFIG", os.path.join(here, "ratekeeper.yaml")),
                      store=os.environ.get("RATEKEEPER_STORE"))
app = FastAPI()
limiter.install(app)  # the file's rules on every request, 429 with Retry-After beyond them


@app.get("/api/data")
async def get_data():
    return {"data": "success"}


@app.get("/api/profile")
async def get_profile(request: Request):
    return {"profile": {"user": request.headers.get("X-User-ID", "anonymous")}}


@app.get("/api/items/{item}")
async def get_item(item: str):
    return {"item": item}


# An endpoint's own limit, declared where it is served: 10 a minute per client IP.
@app.get("/api/search")
@limiter.limit("10/minute")
async def search(q: str = ""):
    return {"results": [], "query": q}


# A rule of the file checked for one endpoint, as a dependency.
@app.post("/auth/login", dependencies=[Depends(limiter.dependency("login"))])
async def login():
    return {"token": "demo"}


# A WebSocket's handshake goes through the rules as a GET: here at most 2 open per client IP.
@app.websocket("/ws/echo")
async def echo(websocket: WebSocket):
    await websocket.accept()
    try:
        while True:
            await websocket.send_text(await websocket.receive_text())
    except WebSocketDisconnect:
        pass
