"""Conformance: tracked steps, progress a step journals, and a hook receive with a deadline,
on every World. An interrupted drive (its task cancelled while the step's function waits) is
what a crash leaves: the records up to then, no result."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.worlds import WorldOpener
from world import Engine, RetryPolicy, WorkflowContext, current_step


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Probe:
    """A step function that records what it saw, journals progress, then may hang."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, int, bool, Any, float | None]] = []
        self.hang = True
        self.started = asyncio.Event()

    async def __call__(self, value: str) -> str:
        step = current_step()
        assert step is not None
        self.seen.append((step.interrupted, step.attempt, step.recorded, step.progress, step.began))
        if not step.recorded:
            step.record({"sent": value})
        self.started.set()
        if self.hang:
            await asyncio.Event().wait()  # the crash comes while it waits
        return f"done {step.progress['sent']}"


async def interrupt(engine: Engine, rid: str, probe: Probe) -> None:
    task = asyncio.ensure_future(engine.run(rid))
    await asyncio.wait_for(probe.started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_tracked_step_knows_it_was_interrupted_and_keeps_its_progress(
    open_world: WorldOpener,
) -> None:
    probe = Probe()

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        first: str = await ctx.step("send", probe.__call__, "x", tracked=True)
        return [first, await ctx.step("after", lambda: "after")]

    async def main() -> None:
        engine = Engine(open_world(), {"flow": flow})
        rid = await engine.start("flow")
        await interrupt(engine, rid, probe)
        probe.hang, probe.started = False, asyncio.Event()
        again = Engine(open_world(), {"flow": flow})  # another process's engine
        info = await again.run(rid)
        assert info.status == "completed" and info.result == ["done x", "after"]
        first, second = probe.seen
        assert first[:4] == (False, 1, False, None)
        assert second[:4] == (True, 2, True, {"sent": "x"})
        # The first run's start, a past time (a second's slack: the wall clock may be
        # stepped back by the machine between the record and this line).
        assert first[4] is not None and second[4] == first[4] <= time.time() + 1
        kinds = [r["t"] for r in again.history(rid)]
        assert kinds.count("began") == 2 and kinds.count("prog") == 1
        # A completed step replays from its records: the function does not run again.
        await again.run(rid)
        assert len(probe.seen) == 2

    run(main())


def test_an_untracked_step_reads_its_progress_but_not_an_interruption_without_it(
    open_world: WorldOpener,
) -> None:
    calls: list[tuple[bool, Any]] = []

    started = asyncio.Event()

    async def noted() -> str:
        step = current_step()
        assert step is not None
        calls.append((step.interrupted, step.progress))
        if len(calls) == 1:
            step.record(7)
            started.set()
            await asyncio.Event().wait()
        return "ok"

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("s", noted)

    async def main() -> None:
        engine = Engine(open_world(), {"flow": flow})
        rid = await engine.start("flow")
        task = asyncio.ensure_future(engine.run(rid))
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await Engine(open_world(), {"flow": flow}).run(rid)).result == "ok"
        # Progress says a run began: the next one knows, tracked or not.
        assert calls == [(False, None), (True, 7)]

    run(main())
    assert current_step() is None  # outside a step function


def test_a_failed_attempt_is_not_an_interruption_and_its_progress_stays(
    open_world: WorldOpener,
) -> None:
    seen: list[tuple[int, bool, Any]] = []

    def flaky() -> str:
        step = current_step()
        assert step is not None
        seen.append((step.attempt, step.interrupted, step.progress))
        if step.attempt == 1:
            step.record("half")
            raise RuntimeError("boom")
        return "ok"

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        fast = RetryPolicy(max_attempts=2, initial_delay=0.001)
        return await ctx.step("s", flaky, retry=fast, tracked=True)

    async def main() -> None:
        engine = Engine(open_world(), {"flow": flow})
        rid = await engine.start("flow")
        assert (await engine.run(rid)).result == "ok"

    run(main())
    assert seen == [(1, False, None), (2, False, "half")]


def test_a_receive_with_a_deadline_times_out_on_a_durable_timer(open_world: WorldOpener) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> Any:
        hook = ctx.create_hook("t-deadline")
        try:
            return await hook.receive(timeout=0.6)
        except TimeoutError:
            return "timed out"

    async def main() -> None:
        engine = Engine(open_world(), {"flow": flow})
        rid = await engine.start("flow")
        info = await engine.run(rid)
        assert info.status == "parked" and info.wake_at is not None
        assert info.waiting is not None and info.waiting["hook"] == "t-deadline"
        assert rid not in engine.runnable()
        again = Engine(open_world(), {"flow": flow})  # a fresh process finds the timer
        assert await again.wait(rid, timeout=5.0)
        assert rid in again.runnable()
        assert (await again.run(rid)).result == "timed out"
        # A delivery after the end finds no run; the replay says the same.
        assert (await again.run(rid)).result == "timed out"

    run(main())


def test_a_delivery_before_the_deadline_wakes_the_receive_early(open_world: WorldOpener) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> Any:
        hook = ctx.create_hook("t-early")
        return await hook.receive(timeout=60)

    async def main() -> None:
        engine = Engine(open_world(), {"flow": flow})
        rid = await engine.start("flow")
        assert (await engine.run(rid)).status == "parked"
        began = time.monotonic()
        await Engine(open_world(), {"flow": flow}).resume_hook("t-early", "hello")
        assert rid in engine.runnable()
        info = await Engine(open_world(), {"flow": flow}).run(rid)
        assert info.result == "hello" and time.monotonic() - began < 30

    run(main())
