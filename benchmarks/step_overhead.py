"""Durable step overhead through the whole agent runtime, against the append+fsync floor.

One session on the scripted model runs turns of ``CHUNK`` steps; each step is one model call
that asks for the no-op tool, then the tool call (two durable actions). After each turn the
floor is measured on the same disk: the bytes that turn added to the data directory, appended
to a fresh file in as many writes as the turn had durable actions, each write followed by
``fdatasync``. Turns and floors alternate so disk noise hits both; medians over the rounds.

* ``step_overhead.step``: seconds per step (``baseline``: the floor per step). SPEC §11:
  ratio ≤ 3 (goal 1.5).
* ``step_overhead.reserved``: the same steps against the floor written into space allocated
  beforehand, as eve's journals are (each ``fdatasync`` then commits less): what the step
  costs beyond its fsyncs, whichever way they are made.
* ``step_overhead.fsyncs``: fsync/fdatasync calls per step (``baseline``: durable actions per
  step, the floor's count).
* ``step_overhead.bytes``: bytes written to the data directory per step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import FsyncCounter, append_floor, call, disk_usage, median, scratch, write_agent

CHUNK = 50
ACTIONS_PER_STEP = 2  # the model call and the tool call


def _script(turns: int, steps: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for _ in range(turns):
        entries += [{"text": "", "tool_calls": [call("noop")]} for _ in range(steps - 1)]
        entries.append({"text": "done", "tool_calls": []})
    return entries


def measure(root: Path, steps: int) -> Iterator[dict[str, Any]]:
    from eve_cli.runtime import Runtime

    chunk = min(CHUNK, steps)
    rounds = max(steps // chunk, 1)
    agent = write_agent(root / "agent", _script(rounds, chunk))
    data = root / "data"
    rt = Runtime(data_dir=data, agent_dir=agent)
    counter = FsyncCounter()
    per_step, floor, reserved, fsyncs, written = [], [], [], [], []

    async def main() -> None:
        sid = await rt.create_session()
        await rt.drive(sid)  # the session starts and waits for its first message
        for _ in range(rounds):
            await rt.deliver(sid, "go")
            before, _ = disk_usage(data)
            counter.count = 0
            with counter.active():
                started = time.perf_counter()
                view = await rt.drive(sid)
                elapsed = time.perf_counter() - started
            if view["status"] != "waiting" or view["turns"][-1]["status"] != "completed":
                raise RuntimeError(f"benchmark turn did not complete: {view['turns'][-1]}")
            after, _ = disk_usage(data)
            size = max(after - before, 1)
            writes = chunk * ACTIONS_PER_STEP
            sizes = [size // writes] * writes
            floor.append(append_floor(root, sizes) / chunk)
            reserved.append(append_floor(root, sizes, reserved=True) / chunk)
            per_step.append(elapsed / chunk)
            fsyncs.append(counter.count / chunk)
            written.append(size / chunk)

    try:
        asyncio.run(main())
    finally:
        rt.close()
    value, baseline = median(per_step), median(floor)
    yield measurement("step_overhead.step", value, "s/step", baseline=baseline, steps=steps)
    yield measurement("step_overhead.reserved", value, "s/step", baseline=median(reserved))
    yield measurement(
        "step_overhead.fsyncs", median(fsyncs), "fsyncs/step", baseline=ACTIONS_PER_STEP
    )
    yield measurement("step_overhead.bytes", median(written), "bytes/step")


def run(quick: bool) -> Iterator[dict[str, Any]]:
    with scratch("step") as root:
        yield from measure(root, 20 if quick else 1000)
