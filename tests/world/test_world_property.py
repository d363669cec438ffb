"""Property: whatever the delivery schedule, generations, child readers, fresh engines and lost
heads, every payload is consumed exactly once and in order, and no step runs twice."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from world import Engine, LocalWorld, MemoryWorld, WorkflowContext, World

TOKEN = "t-prop"


class Killed(BaseException):
    """Stands for kill -9 inside a step: nothing after it runs, nothing is journaled."""


def _workflows(effects: Counter[str], kill: list[str]) -> dict[str, Any]:
    def effect(msg: str) -> str:
        if kill and kill[0] == "before":
            kill.clear()
            raise Killed
        effects[msg] += 1
        if kill and kill[0] == "after":
            kill[:] = [msg]  # this step's effect happened, its record will not
            raise Killed
        return msg

    async def loop(ctx: WorkflowContext, state: dict[str, Any]) -> list[str]:
        hook = ctx.create_hook(TOKEN) if state["g"] == 0 else ctx.hook(TOKEN)
        if state["g"] > 0:  # park on another hook first: messages wait across loads
            await ctx.hook("t-tick").receive()
        else:
            ctx.create_hook("t-tick")
        seen: list[str] = list(state["seen"])
        while True:
            mode = len(seen) % 3
            if mode == 0:
                got = [await hook.receive()]
            elif mode == 1:
                got = await hook.poll() or [await hook.receive()]
            else:
                got = [await ctx.run_child("reader", TOKEN)]
            for msg in got:
                seen.append(await ctx.step("effect", effect, msg))
            if "stop" in got:
                return seen
            if len(seen) >= 3 * (state["g"] + 1):
                ctx.continue_as_new({"seen": seen, "g": state["g"] + 1})

    async def reader(ctx: WorkflowContext, token: str) -> Any:
        return await ctx.hook(token).receive()

    return {"loop": loop, "reader": reader}


schedules = st.lists(
    # (messages delivered before a run, a tick too, drop the head, kill in the next step)
    st.tuples(
        st.integers(0, 3),
        st.booleans(),
        st.booleans(),
        st.sampled_from(["", "", "before", "after"]),
    ),
    min_size=1,
    max_size=10,
)


Schedule = list[tuple[int, bool, bool, str]]


def _check(world: World, schedule: Schedule) -> None:
    effects: Counter[str] = Counter()
    kill: list[str] = []
    workflows = _workflows(effects, kill)
    sent: list[str] = []
    rerun: list[str] = []  # messages whose step was killed after its effect

    async def drive(rid: str) -> Any:
        try:
            return await Engine(world, workflows).run(rid)
        except Killed:
            if kill:
                rerun.append(kill.pop())
            world.commit(rid, head={})  # a killed process writes no head
            return None

    async def main() -> list[str]:
        rid = await Engine(world, workflows).start("loop", {"seen": [], "g": 0})
        await Engine(world, workflows).run(rid)
        for count, tick, drop_head, crash in schedule:
            for _ in range(count):
                sent.append(f"m{len(sent)}")
                await Engine(world, workflows).resume_hook(TOKEN, sent[-1])
            if tick:
                await Engine(world, workflows).resume_hook("t-tick", None)
            if drop_head:
                world.commit(rid, head={})  # an unusable head: everything is rebuilt
            kill[:] = [crash] if crash else []
            await drive(rid)
            kill.clear()
        sent.append("stop")
        await Engine(world, workflows).resume_hook(TOKEN, "stop")
        info = await Engine(world, workflows).run(rid)
        for _ in range(len(sent)):
            if info.status == "completed":
                break
            await Engine(world, workflows).resume_hook("t-tick", None)
            info = await Engine(world, workflows).run(rid)
        assert info.status == "completed", info
        return list(info.result)

    assert asyncio.run(main()) == sent
    # Every payload handled once; only a step killed after its effect ran again.
    assert effects == Counter(sent) + Counter(rerun)


@settings(max_examples=60, deadline=None)
@given(schedules)
def test_memory_world(schedule: Schedule) -> None:
    _check(MemoryWorld(), schedule)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(schedules)
def test_local_world(tmp_path: Path, schedule: Schedule) -> None:
    folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    world = LocalWorld(folder)
    try:
        _check(world, schedule)
    finally:
        world.close()


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(schedules)
def test_postgres_world(schedule: Schedule) -> None:
    from tests.pg_support import fresh_schema
    from world.stores.postgres.world import PostgresWorld

    with fresh_schema() as url:
        world = PostgresWorld(url)
        try:
            _check(world, schedule)
        finally:
            world.close()
