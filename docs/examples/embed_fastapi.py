"""eve's HTTP API inside a FastAPI application: `uvicorn embed_fastapi:app`.

The agent's routes are mounted under /agent (so `POST /agent/eve/v1/session`, the browser
view at /agent/, `/agent/metrics`), beside the application's own. EVE_AGENT names the agent
folder (default ./agent), EVE_WORLD the world (a data directory or a postgresql:// URL).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from eve_cli.channel import Channel, ChannelSettings
from eve_cli.runtime import Runtime

runtime = Runtime(os.environ.get("EVE_WORLD"), os.environ.get("EVE_AGENT"))
channel = Channel(runtime, ChannelSettings(token=os.environ.get("EVE_AUTH_TOKEN")))


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # A mounted app's lifespan is not run by its parent: the channel's background work
    # (resuming in-flight sessions, timers, schedules) runs inside the application's own.
    async with channel.running():
        yield
    runtime.close()


app = FastAPI(lifespan=lifespan)
app.mount("/agent", channel.app)


@app.get("/hello")
async def hello() -> dict[str, str]:
    """One of the application's own routes."""
    return {"hello": "from the application"}
