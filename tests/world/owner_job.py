"""Helper process for the ownership and wake-up tests: `python owner_job.py MODE WORLD` (a
data directory or a PostgreSQL URL).

MODE `hold`: drive run `held`, whose first step blocks forever (the test SIGKILLs us).
MODE `serve`: start run `served`, drive it until it parks on hook `t-served`, then wait (no
lock held) for a delivery from another process, drive it again and print its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

from world import Engine, RunExistsError, WorkflowContext, open_world


def block() -> None:
    print("owning", flush=True)
    time.sleep(3600)


async def held(ctx: WorkflowContext, _: Any) -> str:
    await ctx.step("block", block)
    return "never"


async def served(ctx: WorkflowContext, _: Any) -> Any:
    return await ctx.create_hook("t-served").receive()


async def main(mode: str, data: str) -> None:
    engine = Engine(open_world(data), {"held": held, "served": served})
    if mode == "hold":
        await engine.run("held")
        return
    with contextlib.suppress(RunExistsError):
        await engine.start("served", run_id="served")
    info = await engine.run("served")
    print(info.status, flush=True)
    while info.status != "completed":
        await engine.wait("served", timeout=30)
        info = await engine.run("served")
    print(json.dumps(info.result), flush=True)


asyncio.run(main(sys.argv[1], sys.argv[2]))
