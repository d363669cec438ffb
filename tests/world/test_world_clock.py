"""The world's clock (`World.now`): every durable time is read from it. The local and memory
worlds give this process's clock; PostgreSQL gives the database's (this process's corrected by
the offset measured when it connects), so a process whose clock is wrong (the test hook
`EVE_TEST_CLOCK_SKEW`) still agrees with the others on when a timer is due. Workers on one
database, one skewed, firing each other's timers:
tests/eve_cli/channel/test_channel_clock_skew.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.pg_support import fresh_schema
from world import Engine, LocalWorld, MemoryWorld, WorkflowContext

SKEW = 1000.0

_PROBE = """
import json, sys, time, asyncio
from world import open_world, Engine

async def nap(ctx, seconds):
    began = ctx.now().timestamp()
    await ctx.sleep(seconds)
    return [began, ctx.now().timestamp()]

async def main(spec):
    world = open_world(spec)
    engine = Engine(world, {"nap": nap})
    rid = await engine.start("nap", 0.3)
    info = await engine.run(rid)
    parked = [w for _, w in engine.timers(rid)]
    while info.status != "completed":
        await engine.wait(rid, 5)
        info = await engine.run(rid)
    print(json.dumps({"real": time.time(), "now": world.now(), "parked": parked,
                      "began": info.result[0], "woke": info.result[1]}))
    world.close()

asyncio.run(main(sys.argv[1]))
"""


def probe(spec: str, skew: float) -> dict[str, Any]:
    """A process with its clock `skew` seconds off: its world's clock, and a 0.3 s sleep."""
    env = {**os.environ, "EVE_TEST_CLOCK_SKEW": str(skew)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, spec], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_the_local_and_memory_worlds_tell_this_process_s_time(tmp_path: Path) -> None:
    for world in (MemoryWorld(), LocalWorld(tmp_path / "data")):
        assert abs(world.now() - time.time()) < 0.05
        world.close()


def test_a_local_world_goes_by_its_process_s_clock_and_sleeps_as_long_skewed_or_not(
    tmp_path: Path,
) -> None:
    found = probe(str(tmp_path / "data"), SKEW)
    assert abs(found["now"] - found["real"] - SKEW) < 0.5  # unchanged: the process's clock
    assert found["parked"][0] == pytest.approx(found["began"] + 0.3)
    assert 0.3 <= found["woke"] - found["began"] < 1.5


@pytest.mark.parametrize("skew", [SKEW, -SKEW])
def test_a_postgres_world_tells_the_database_s_time_whatever_the_process_s_clock(
    skew: float,
) -> None:
    with fresh_schema() as url:
        found = probe(url, skew)
    assert abs(found["now"] - found["real"]) < 0.05  # the database's clock (the same host's)
    assert abs(found["began"] - found["real"]) < 5.0  # the journal's times too
    assert found["parked"][0] == pytest.approx(found["began"] + 0.3)  # the wake time too
    assert 0.3 <= found["woke"] - found["began"] < 1.5


def test_a_skew_that_is_not_a_number_is_one_clear_line() -> None:
    env = {**os.environ, "EVE_TEST_CLOCK_SKEW": "soon"}
    done = subprocess.run(
        [sys.executable, "-c", "import world"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "EVE_TEST_CLOCK_SKEW: 'soon' is not a number of seconds" in done.stderr


async def _napping(ctx: WorkflowContext, _: object) -> None:
    await ctx.sleep(5.0)


def test_an_engine_times_records_and_timers_by_its_world_s_clock() -> None:
    class Ahead(MemoryWorld):
        def now(self) -> float:
            return time.time() + SKEW

    engine = Engine(Ahead(), {"nap": _napping})

    async def main() -> str:
        rid = await engine.start("nap")
        await engine.run(rid)
        return rid

    rid = asyncio.run(main())
    assert abs(float(engine.history(rid)[0]["at"]) - time.time() - SKEW) < 1.0
    [(_, wake)] = engine.timers(rid)
    assert abs(wake - time.time() - SKEW - 5.0) < 1.0
    assert engine.runnable() == []  # not due by the world's clock (long past by this one's)
