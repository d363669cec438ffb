"""A workflow run in a subprocess by the crash tests: `python crash_job.py DATA EFFECTS STEPS`.

Each step appends its index to EFFECTS (fsync'd) before returning, so the test can count how
often each step really ran. Starts the run `job` if it does not exist, then drives it to the
end and prints the result as JSON. Fault points come from `EVE_FAULTS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from world import Engine, LocalWorld, RunExistsError, WorkflowContext

EFFECTS = sys.argv[2]


def effect(i: int) -> int:
    fd = os.open(EFFECTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{i}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return i * i


async def job(ctx: WorkflowContext, steps: int) -> dict[str, Any]:
    total = 0
    for i in range(steps):
        total += await ctx.step(f"s{i}", effect, i)
        if i == steps // 2:
            total += await ctx.run_child("sub", i)
    return {"total": total, "id": str(ctx.uuid()), "rand": ctx.random()}


async def sub(ctx: WorkflowContext, i: int) -> int:
    return int(await ctx.step("sub", effect, 1000 + i))


async def main() -> None:
    engine = Engine(LocalWorld(sys.argv[1]), {"job": job, "sub": sub})
    with contextlib.suppress(RunExistsError):
        await engine.start("job", int(sys.argv[3]), run_id="job")
    print("ready", flush=True)
    info = await engine.run("job", wait=10)
    print(json.dumps({"status": info.status, "result": info.result}), flush=True)


asyncio.run(main())
