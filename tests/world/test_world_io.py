"""`World.io`: the engine makes a network world's calls off the event loop while it drives
several families, so one family's round trips do not stall the loop that drives the others
(and serves HTTP), and a slow world's always; a quick world's inline while it drives one
(`_offload.Placement`)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any

from world import Engine, HookConflictError, MemoryWorld, NoActiveRunError, WorkflowContext
from world._store import IO

DELAY = 0.04  # seconds each storage call of the slow world takes (a round trip)
# Storage calls the engine makes while it creates, drives and delivers (not waits, not reads
# a step function makes itself).
SLOW = (
    "create_family", "family_exists", "load", "append", "read_head", "write_head", "deliver",
    "read_inbox", "inbox_end", "claim_hook", "hook_owner", "release_hook", "acquire",
    "compact_inbox",
)  # fmt: skip


class SlowWorld(MemoryWorld):
    """A memory world whose every call takes `DELAY` and says so (`IO.NETWORK`), recording
    the threads its calls ran on."""

    io = IO.NETWORK

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()


def _slow(name: str) -> Any:
    inner = getattr(MemoryWorld, name)

    def call(self: SlowWorld, *args: Any, **kwargs: Any) -> Any:
        self.threads.add(threading.current_thread().name)
        time.sleep(DELAY)
        return inner(self, *args, **kwargs)

    return call


for _name in SLOW:
    setattr(SlowWorld, _name, _slow(_name))


async def steps(ctx: WorkflowContext, n: int) -> int:
    return sum([await ctx.step(f"s{i}", lambda i=i: i) for i in range(n)])


def test_a_network_worlds_calls_never_hold_the_loop() -> None:
    world = SlowWorld()
    engine = Engine(world, {"steps": steps})
    gaps: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def main() -> list[int]:
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(stop))
        ids = [await engine.start("steps", 4, run_id=f"r{i}") for i in range(3)]
        infos = await asyncio.gather(*(engine.run(rid) for rid in ids))
        stop.set()
        await tick
        return [info.result for info in infos]

    started = time.monotonic()
    assert asyncio.run(main()) == [6, 6, 6]
    elapsed = time.monotonic() - started
    assert "MainThread" not in world.threads  # every slow call ran off the loop's thread
    # The loop went on ticking through hundreds of round trips (each one DELAY long): had the
    # calls run on it, nearly every tick would have waited a whole call. The 90th percentile,
    # not the maximum, so that a loaded machine's one late wake-up does not count as a stall.
    gaps.sort()
    assert len(gaps) > 20 and gaps[len(gaps) * 9 // 10] < DELAY / 2, (gaps[-5:], elapsed)


def test_a_solo_drives_quick_calls_are_taken_without_a_turn_of_the_loop_then_inline() -> None:
    """While one family is driven, the loop waits up to `QUICK_WAIT` for a network world's
    call made on a thread (a quick result is taken with nothing else run meanwhile); once
    `QUICK_AFTER` calls in a row were quick, the calls are made inline on the loop's thread,
    until one takes longer; then threads again. Each runs in the caller's context. (Calls
    are timed by a clock of the test's: a loaded machine's slow hop does not count.)"""
    from world._offload import QUICK_AFTER, QUICK_WAIT, Placement

    clock = [0.0]
    placement = Placement(clock=lambda: clock[0])
    probe: contextvars.ContextVar[str] = contextvars.ContextVar("probe", default="unset")
    ran: list[int] = []
    slow = [False]

    def call() -> tuple[str, str]:
        if slow[0]:
            clock[0] += QUICK_WAIT * 5
        return threading.current_thread().name, probe.get()

    async def main() -> tuple[list[tuple[str, str]], list[bool]]:
        probe.set("caller")
        loop, results, turned = asyncio.get_running_loop(), [], []
        for number in range(QUICK_AFTER * 3):
            slow[0] = number == QUICK_AFTER * 2  # one slow call among quick ones
            loop.call_soon(ran.append, number)
            results.append(await placement.call(IO.NETWORK, 1, call))
            turned.append(number in ran)
        return results, turned

    results, turned = asyncio.run(main())
    assert all(seen == "caller" for _, seen in results)
    names = [name for name, _ in results]
    two = QUICK_AFTER * 2
    assert "MainThread" not in names[:QUICK_AFTER]  # not proven quick yet
    assert not all(turned[:QUICK_AFTER])  # a quick one taken with no turn of the loop
    assert names[QUICK_AFTER : two + 1] == ["MainThread"] * (two + 1 - QUICK_AFTER)
    assert not any(turned[QUICK_AFTER : two + 1])  # inline: the loop never turned
    assert "MainThread" not in names[two + 1 :]  # the slow one sent them back to threads


def test_a_call_that_would_wait_inline_is_made_again_on_a_thread() -> None:
    """A store's call made inline that raises `WouldWait` (it would wait to retry, or it is
    a write it could not make again) is made again from its start on a thread; and while
    several families are driven, a network world's calls are always made on threads."""
    from world import _offload
    from world._offload import QUICK_AFTER, Placement, WouldWait

    placement = Placement(clock=lambda: 0.0)  # every call quick, however the machine is loaded
    tries: list[tuple[str, bool]] = []

    def write() -> str:
        tries.append((threading.current_thread().name, _offload.inline()))
        if _offload.inline():
            raise WouldWait
        return "written"

    async def main() -> list[str]:
        for _ in range(QUICK_AFTER):
            await placement.call(IO.NETWORK, 1, lambda: None)
        out = [await placement.call(IO.NETWORK, 1, write)]
        out.append(await placement.call(IO.NETWORK, 1, lambda: threading.current_thread().name))
        out.append(await placement.call(IO.NETWORK, 2, lambda: threading.current_thread().name))
        out.append(await placement.call(IO.DISK, 1, lambda: threading.current_thread().name))
        out.append(await placement.call(IO.DISK, 2, lambda: threading.current_thread().name))
        return out

    written, after, several, disk_one, disk_several = asyncio.run(main())
    assert written == "written"
    assert tries[0] == ("MainThread", True) and tries[1][0] != "MainThread"
    assert tries[1][1] is False and len(tries) == 2  # once inline, once again on a thread
    assert after == "MainThread"  # a quick remake keeps the store's calls inline
    assert several != "MainThread" and disk_several != "MainThread"
    assert disk_one == "MainThread"


def test_a_memory_world_is_called_inline() -> None:
    world = MemoryWorld()
    seen: set[str] = set()
    real = world.append

    def append(*args: Any, **kwargs: Any) -> Any:
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    world.append = append  # type: ignore[method-assign]
    engine = Engine(world, {"steps": steps})

    async def main() -> Any:
        rid = await engine.start("steps", 3)
        return (await engine.run(rid)).result

    assert asyncio.run(main()) == 3 and seen == {"MainThread"}


async def hooked(ctx: WorkflowContext, n: int) -> list[Any]:
    first = await ctx.create_hook()  # awaited: claimed and recorded off the loop
    second = ctx.create_hook()  # claimed off the loop at the run's next operation
    total = await steps(ctx, n)
    return [total, await first.poll(), await second.poll()]


def test_a_network_worlds_hooks_are_claimed_off_the_loop_in_order() -> None:
    world = SlowWorld()
    engine = Engine(world, {"hooked": hooked, "taken": taken})

    async def main() -> list[Any]:
        rid = await engine.start("hooked", 2)
        return [rid, (await engine.run(rid)).result]

    rid, result = asyncio.run(main())
    assert result == [1, [], []]
    assert "MainThread" not in world.threads
    kinds = [r["t"] for r in engine.history(rid) if r["t"] in ("hook", "step")]
    assert kinds == ["hook", "hook", "step", "step"]  # claimed before the steps, in order


async def taken(ctx: WorkflowContext, token: str) -> Any:
    try:
        hook = await ctx.create_hook(token)
    except HookConflictError:
        return "conflict"
    return await hook.receive()  # parks: the token stays this run's


def test_a_hook_conflict_is_raised_where_the_handle_is_awaited() -> None:
    world = SlowWorld()
    engine = Engine(world, {"hooked": hooked, "taken": taken})

    async def main() -> list[Any]:
        owner = await engine.start("taken", "tok")
        other = await engine.start("taken", "tok")
        return [(await engine.run(owner)).status, (await engine.run(other)).result]

    assert asyncio.run(main()) == ["parked", "conflict"]


async def closing(ctx: WorkflowContext, park: bool) -> Any:
    hook = await ctx.create_hook("closed-one")
    hook.close()  # released off the loop: at the next operation, or when the run parks or ends
    if park:
        return await (await ctx.create_hook("kept")).receive()
    return "done"


def test_a_network_worlds_hook_is_closed_off_the_loop() -> None:
    world = SlowWorld()
    engine = Engine(world, {"closing": closing})

    async def main() -> list[Any]:
        parked = await engine.start("closing", True)
        ended = await engine.start("closing", False)
        infos = [(await engine.run(parked)).status, (await engine.run(ended)).result]
        try:
            await engine.resume_hook("closed-one", "late")
        except NoActiveRunError:
            infos.append("released")
        await engine.resume_hook("kept", "hello")
        return [*infos, (await engine.run(parked)).result]

    assert asyncio.run(main()) == ["parked", "done", "released", "hello"]
    assert "MainThread" not in world.threads  # the releases too ran off the loop's thread


async def looking(ctx: WorkflowContext, token: str) -> Any:
    await ctx.create_hook(token)
    await ctx.step("s", lambda: 1)
    again = ctx.hook(token)  # its owner looked up off the loop, at the next operation
    return await again.poll()


async def peeking(ctx: WorkflowContext, token: str) -> Any:
    handle = ctx.hook(token)  # another run's: refused where the handle is first used
    try:
        return await handle.poll()
    except HookConflictError:
        return "conflict"


def test_a_network_worlds_hook_lookup_is_made_off_the_loop() -> None:
    world = SlowWorld()
    engine = Engine(world, {"looking": looking, "peeking": peeking, "taken": taken})

    async def main() -> list[Any]:
        mine = await engine.start("looking", "seen")
        owner = await engine.start("taken", "owned")
        other = await engine.start("peeking", "owned")
        return [
            (await engine.run(mine)).result,
            (await engine.run(owner)).status,
            (await engine.run(other)).result,
        ]

    assert asyncio.run(main()) == [[], "parked", "conflict"]
    assert "MainThread" not in world.threads  # hook_owner too ran off the loop's thread


def test_a_cancelled_caller_goes_on_only_once_the_call_in_flight_has_ended() -> None:
    world = SlowWorld()
    engine = Engine(world, {"steps": steps})
    ended: list[float] = []

    def slow_call() -> str:
        time.sleep(0.3)
        ended.append(time.monotonic())
        return "stored"

    async def main() -> tuple[float, Any]:
        task = asyncio.create_task(engine.io(slow_call))
        await asyncio.sleep(0.05)  # the call is running on the pool's thread
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return time.monotonic(), "cancelled"
        return time.monotonic(), task.result()

    went_on, outcome = asyncio.run(main())
    # The lease must not be released under a write in flight: the cancellation goes through
    # only after the call returned.
    assert outcome == "cancelled" and ended and went_on >= ended[0]
    assert asyncio.run(engine.io(lambda: 7)) == 7  # the result, from the pool's thread


async def looked_up_and_closed(ctx: WorkflowContext, token: str) -> Any:
    await ctx.create_hook(token)
    ctx.hook(token).close()  # looked up, then released before any operation
    return await ctx.step("after", lambda: "went on")


def test_a_hook_looked_up_then_closed_on_a_network_world_is_not_checked_after() -> None:
    world = SlowWorld()
    engine = Engine(world, {"closed": looked_up_and_closed})

    async def main() -> Any:
        rid = await engine.start("closed", "brief")
        return (await engine.run(rid)).result

    assert asyncio.run(main()) == "went on"
