"""One owner per family across processes; a dead owner frees the family at once; a parked
run in one process is woken by a delivery from another; readers need no lock. On the local
and the PostgreSQL world (`world_spec`)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from world import Engine, OwnershipError, WorkflowContext, open_world

HELPER = str(Path(__file__).with_name("owner_job.py"))


def _helper(mode: str, data: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, HELPER, mode, str(data)], stdout=subprocess.PIPE, text=True
    )


async def held(ctx: WorkflowContext, _: Any) -> str:
    await ctx.step("block", lambda: None)
    return "taken over"


def test_a_killed_owner_frees_the_family_at_once(world_spec: str) -> None:
    data = world_spec
    engine = Engine(open_world(data), {"held": held})
    asyncio.run(engine.start("held", run_id="held"))
    owner = _helper("hold", data)
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "owning"
        with pytest.raises(OwnershipError, match="held"):
            asyncio.run(engine.run("held"))
        # Readers need no lock while the owner runs.
        assert engine.info("held").status == "running"
        assert [r["t"] for r in engine.history("held")] == ["start"]
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.communicate(timeout=10)
    started = time.monotonic()
    # PostgreSQL frees the dead owner's liveness lock when its backend sees the connection
    # close, a moment after the process is gone: the run may wait that long, not a lease.
    assert asyncio.run(engine.run("held", wait=1.5)).result == "taken over"
    assert time.monotonic() - started < 2.0  # no lease timeout to sit out


def test_a_parked_run_is_woken_by_a_delivery_from_another_process(world_spec: str) -> None:
    data = world_spec
    server = _helper("serve", data)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "parked"
        engine = Engine(open_world(data), {})
        assert asyncio.run(engine.resume_hook("t-served", {"hello": "from afar"})) == "served"
        out, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=10)
    assert out.strip() == '{"hello": "from afar"}'
    assert engine.info("served").status == "completed"
