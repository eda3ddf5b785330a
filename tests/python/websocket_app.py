"""WebSocket endpoints limited by ratekeeper.asgi's decorator and dependency, without the
middleware (tests/python/test_asgi.py runs it under uvicorn). The rules are RATEKEEPER_CONFIG's,
the store RATEKEEPER_STORE."""

import os

from fastapi import Depends, FastAPI, WebSocket

from ratekeeper.asgi import RateLimiter

limiter = RateLimiter(os.environ["RATEKEEPER_CONFIG"], store=os.environ["RATEKEEPER_STORE"])
app = FastAPI()
app.add_event_handler("startup", limiter.open)
app.add_event_handler("shutdown", limiter.close)


async def greet(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text("hello")
    await websocket.close()


@app.websocket("/ws/dependency")
async def with_dependency(websocket: WebSocket, decision=Depends(limiter.dependency("login"))):
    await greet(websocket)


@app.websocket("/ws/decorated")
@limiter.limit("2/hour")
async def decorated(websocket: WebSocket):
    await greet(websocket)
