"""A turn's cost against its session's age, on the local world, with real payloads.

One session on the scripted model runs ``TURNS`` turns of ``STEPS`` steps each; every step a
model call that says ``STEP_TEXT`` (~365 bytes) and asks for a tool returning as much, then
the tool, as ``step_overhead.text`` does. Each turn's drive is timed, the session's end of
drive (its view, its listing row) included.

* ``late_turn.drive``: seconds of a drive in the session's last 5% of turns (``baseline``:
  in its 5–10%). SPEC: a turn costs the same however old the session is: ratio ~1.
* ``late_turn.cpu``: the same in process CPU seconds, which other tenants' load does not
  blur.

Medians.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import STEP_TEXT, call, median, scratch, write_agent

STEPS = 50


def _script(turns: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for _ in range(turns):
        step = {"text": STEP_TEXT, "tool_calls": [call("payload")]}
        entries += [dict(step) for _ in range(STEPS - 1)]
        entries.append({"text": "done", "tool_calls": []})
    return entries


def measure(root: Path, turns: int) -> Iterator[dict[str, Any]]:
    from eve_cli.runtime import Runtime

    rt = Runtime(data_dir=root / "data", agent_dir=write_agent(root / "agent", _script(turns)))
    wall: list[float] = []
    cpu: list[float] = []

    async def main() -> None:
        sid = await rt.create_session()
        await rt.drive(sid)
        for _ in range(turns):
            await rt.deliver(sid, "go")
            started, used = time.perf_counter(), time.process_time()
            view = await rt.drive(sid)
            cpu.append(time.process_time() - used)
            wall.append(time.perf_counter() - started)
            if view["turns"][-1]["status"] != "completed":
                raise RuntimeError(f"benchmark turn did not complete: {view['turns'][-1]}")

    try:
        asyncio.run(main())
    finally:
        rt.close()
    tail = max(turns // 20, 1)
    for name, took in (("drive", wall), ("cpu", cpu)):
        early, late = took[tail : 2 * tail], took[-tail:]
        yield measurement(
            f"late_turn.{name}", median(late), "s/turn", baseline=median(early), turns=turns,
            steps=STEPS,
        )  # fmt: skip


def run(quick: bool) -> Iterator[dict[str, Any]]:
    with scratch("late") as root:
        yield from measure(root, 4 if quick else 200)
