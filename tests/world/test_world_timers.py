"""Conformance: `Engine.timers_version` / `timers_since` / `wait_timers` on every World — a
run parked on a timer by one opener (as another process would be) changes the version another
opener waits on, and `timers_since` names its family; a run parked on a hook alone does not.
A world that cannot tell (None) waits the timeout out, and its servers find timers by reading
the heads (PostgreSQL: the workers' sweep)."""

from __future__ import annotations

import asyncio
import time

from tests.worlds import WorldOpener
from world import Engine, WorkflowContext


async def napping(ctx: WorkflowContext, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


async def hooked(ctx: WorkflowContext, token: str) -> object:
    return await ctx.create_hook(token).receive()


def test_a_run_parked_on_a_timer_elsewhere_changes_the_timers_version(
    open_world: WorldOpener,
) -> None:
    writer = open_world()
    engine = Engine(writer, {"napping": napping, "hooked": hooked})
    watcher = Engine(open_world(), {})  # another opener, as another process

    async def main() -> None:
        before = watcher.timers_version()
        waiting = asyncio.ensure_future(watcher.wait_timers(before, 10.0))
        await asyncio.sleep(0.05)  # the waiter is waiting when the timer is parked
        rid = await engine.start("napping", 60.0)
        assert (await engine.run(rid)).status == "parked"
        if before is None:  # this world cannot tell: its waiters wait the timeout out
            waiting.cancel()
            assert not await watcher.wait_timers(None, 0.05)
            return
        began = time.monotonic()
        assert await waiting
        assert time.monotonic() - began < 5.0
        after, roots = watcher.timers_since(before)
        assert after != before and roots == [rid]
        assert watcher.timers_since(after) == (after, [])
        assert await watcher.wait_timers(before, 0.0)  # already changed: at once
        assert watcher.timers_since("not a version")[1] is None  # then: read every head
        # A run parked on a hook alone puts no timer in the world: the version stays.
        hooked_run = await engine.start("hooked", "t-timers")
        assert (await engine.run(hooked_run)).status == "parked"
        assert watcher.timers_version() == after
        assert not await watcher.wait_timers(after, 0.1)
        other = await engine.start("napping", 60.0)
        assert (await engine.run(other)).status == "parked"
        assert watcher.timers_since(before)[1] == sorted([rid, other])

    asyncio.run(main())
