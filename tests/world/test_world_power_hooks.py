"""A released hook stays released through a power cut (tests/power_cut.py crash states): once
a run closed a hook, or finished, and its drive returned, no crash state lets a delivery to
that token be taken as delivered, whatever the head a cut left (heads are never fsync'd)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.power_cut import Disk
from world import Engine, LocalWorld, NoActiveRunError, WorkflowContext


async def closes(ctx: WorkflowContext, _: Any) -> Any:
    first = ctx.create_hook(token="closed-one")
    await first.receive()
    first.close()  # the run goes on, waiting on another hook
    return await ctx.create_hook(token="kept-one").receive()


async def finishes(ctx: WorkflowContext, _: Any) -> Any:
    return await ctx.create_hook(token="finished-one").receive()


FLOWS = {"closes": closes, "finishes": finishes}


async def _workload(world: LocalWorld, disk: Disk) -> dict[str, int]:
    """Each released token, with the moment from which it must stay released."""
    engine = Engine(world, FLOWS)
    a = await engine.start("closes", None, run_id="closer")
    b = await engine.start("finishes", None, run_id="finisher")
    for rid in (a, b):
        assert (await engine.run(rid)).status == "parked"
    await engine.resume_hook("closed-one", 1)
    await engine.resume_hook("finished-one", 2)
    delivered = disk.mark("delivered")
    assert (await engine.run(a)).status == "parked"
    assert (await engine.run(b)).status == "completed"
    released = disk.mark("released")
    return {"closed-one": released, "finished-one": released, "": delivered}


@pytest.mark.parametrize("mixes", [3])
def test_a_released_hook_never_comes_back_after_a_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mixes: int
) -> None:
    base = tmp_path / "device"
    base.mkdir()
    disk = Disk(base)
    with monkeypatch.context() as patch:
        disk.install(patch)
        world = LocalWorld(base / "data")
        released = asyncio.run(_workload(world, disk))
        world.close()
        disk.mark("end")
    checked = 0
    for moment in disk.moments:
        for state, choice in disk.states(moment, mixes, seed=22):
            target = tmp_path / "states" / f"{moment.number}-{state}"
            disk.build(moment, choice, target)
            must = [t for t, at in released.items() if t and at <= moment.number + 1]
            where = f"crash state {target.name} ({moment.label!r})"
            if must:
                checked += 1
                _check(target / "data", must, where)
            elif released[""] <= moment.number + 1:
                _check_order(target / "data", where)
            shutil.rmtree(target)
    assert checked >= 4, "no crash state after the releases was tried"


def _check(data: Path, tokens: list[str], where: str) -> None:
    world = LocalWorld(data)
    try:
        engine = Engine(world, FLOWS)
        for token in tokens:
            with pytest.raises(NoActiveRunError):
                asyncio.run(engine.resume_hook(token, "late"))
                pytest.fail(f"{where}: a delivery to released hook {token} was taken")
            assert world.hook_owner(token) is None, f"{where}: hook {token} came back"
        # The run that closed one hook still takes deliveries on the other.
        asyncio.run(engine.resume_hook("kept-one", 3))
        assert asyncio.run(engine.run("closer")).result == 3
    finally:
        world.close()


def _check_order(data: Path, where: str) -> None:
    """Before the release was acknowledged: a hook gone means its run's end is durable."""
    world = LocalWorld(data)
    try:
        if world.hook_owner("finished-one") is None:
            ends = [r["t"] for r in Engine(world, FLOWS).history("finisher")]
            assert "done" in ends, f"{where}: the hook went before its run's end was durable"
    finally:
        world.close()
