"""A step's cost against its turn's length, once one turn outgrows the model's context window.

One turn on the scripted model runs ``SHORT`` steps, another ``LONG`` (each in a session of
its own): every step a model call that says a little and asks for the no-op tool, then the
tool. The agent's context window is small (``WINDOW`` tokens), so each turn outgrows it after
a few dozen steps and goes on compacting its own history as it grows (keeping its recent
tail), as a long agentic task on a real model does.

* ``long_turn.step``: seconds per step of the ``LONG`` turn (``baseline``: the ``SHORT``
  one's); target (issue 33): ratio ≤ 1.2 — a step costs the same however long its turn is.
* ``long_turn.compactions``: compactions the ``LONG`` turn made (``short``: the ``SHORT``
  one's): it compacted within itself, every few dozen steps, not at every step.

Rounds alternate the two sessions; medians.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import call, median, scratch, text, write_agent

WINDOW = 4000  # tokens
REPLY_CHARS = 200


def _script(steps: int, rng: random.Random) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = [
        {"text": text(rng, REPLY_CHARS), "tool_calls": [call("noop")]} for _ in range(steps - 1)
    ]
    entries.append({"text": "done", "tool_calls": []})
    return entries


def _turn(root: Path, steps: int, seed: int) -> tuple[float, int]:
    """(seconds per step, compactions) of one turn of ``steps`` steps in a new session."""
    from eve_cli.runtime import Runtime

    agent = write_agent(root / "agent", _script(steps, random.Random(seed)), context_window=WINDOW)
    rt = Runtime(data_dir=root / "data", agent_dir=agent)

    async def main() -> tuple[float, int]:
        sid = await rt.create_session()
        await rt.deliver(sid, "work through the list, one item a step")
        started = time.perf_counter()
        view = await rt.drive(sid, view=False)
        took = time.perf_counter() - started
        if view["status"] != "waiting":
            raise RuntimeError(f"the long turn ended {view['status']}")
        return took / steps, rt.session(sid)["compactions"]

    try:
        return asyncio.run(main())
    finally:
        rt.close()


def run(quick: bool) -> Iterator[dict[str, Any]]:
    short, long = (40, 160) if quick else (200, 800)
    rounds = 1 if quick else 3
    per_step: list[list[float]] = [[], []]
    compactions = [0, 0]
    with scratch("long-turn") as root:
        for r in range(rounds):
            for i, steps in enumerate((short, long)):
                seconds, compactions[i] = _turn(root / f"{r}-{i}", steps, seed=r)
                per_step[i].append(seconds)
    step = [median(s) for s in per_step]
    yield measurement("long_turn.step", step[1], "s", baseline=step[0], steps=[short, long])
    yield measurement("long_turn.compactions", compactions[1], "compactions", short=compactions[0])
