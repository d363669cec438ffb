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
* ``step_overhead.waiting``: the same steps with a scripted model that waits once a call (a
  timer of 1 µs, as a network model waits for its first bytes), in its own session, turns
  alternated with the others: the loop turns during the call, and the records before it
  share the tool's fsync only because the world waits for that effect (``fsyncs`` says how
  many a step made).
* ``step_overhead.fsyncs``: fsync/fdatasync calls per step (``baseline``: durable actions per
  step, the floor's count).
* ``step_overhead.bytes``: bytes written to the data directory per step.
* ``step_overhead.text``: the same steps with real payloads (``STEP_TEXT``: about 365 bytes
  of model text, and a tool returning as much), in their own session, turns alternated with
  the others; ``baseline`` the floor of the bytes those steps wrote (as for ``step``),
  ``fsyncs`` per step. Issue 32's gates: ratio ≤ 3, ≤ 1.2 fsyncs a step.
* ``step_overhead.unsafe``: the same steps calling a tool declared ``effects="unsafe"`` (each
  run of it journaled durably as it begins: SPEC §16), in its own session, turns alternated
  with the others (``baseline``: the plain tool's step; ``fsyncs`` per step).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import (
    STEP_TEXT,
    FsyncCounter,
    append_floor,
    call,
    disk_usage,
    median,
    scratch,
    write_agent,
)

CHUNK = 50
ACTIONS_PER_STEP = 2  # the model call and the tool call


WAIT = 1e-6  # the waiting model's pause per call: one timer, as a network model's first read


def _script(
    turns: int, steps: int, delay: float = 0.0, tool: str = "noop", said: str = ""
) -> list[dict[str, Any]]:
    extra = {"delay": delay} if delay else {}
    entries: list[dict[str, Any]] = []
    for _ in range(turns):
        entries += [{"text": said, "tool_calls": [call(tool)], **extra} for _ in range(steps - 1)]
        entries.append({"text": "done", "tool_calls": [], **extra})
    return entries


class _Series:
    """One session's turns and the floors measured after each."""

    def __init__(self) -> None:
        self.per_step: list[float] = []
        self.floor: list[float] = []
        self.reserved: list[float] = []
        self.fsyncs: list[float] = []
        self.written: list[float] = []


def measure(root: Path, steps: int) -> Iterator[dict[str, Any]]:
    from eve_cli.runtime import Runtime

    chunk = min(CHUNK, steps)
    rounds = max(steps // chunk, 1)
    data = root / "data"
    # The same steps twice, turns alternated: the scripted model as it is (it answers at
    # once), and one that waits once a call, as every network model does.
    kinds = (
        ("instant", 0.0, "noop", ""),
        ("waiting", WAIT, "noop", ""),
        ("unsafe", 0.0, "noop_unsafe", ""),
        ("text", 0.0, "payload", STEP_TEXT),
    )
    runtimes = {
        kind: Runtime(
            data_dir=data, agent_dir=write_agent(root / kind, _script(rounds, chunk, d, t, s))
        )
        for kind, d, t, s in kinds
    }
    series = {kind: _Series() for kind in runtimes}
    counter = FsyncCounter()

    async def turn(rt: Runtime, sid: str, out: _Series) -> None:
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
        out.floor.append(append_floor(root, sizes) / chunk)
        out.reserved.append(append_floor(root, sizes, reserved=True) / chunk)
        out.per_step.append(elapsed / chunk)
        out.fsyncs.append(counter.count / chunk)
        out.written.append(size / chunk)

    async def main() -> None:
        sids = {}
        for kind, rt in runtimes.items():
            sids[kind] = await rt.create_session()
            await rt.drive(sids[kind])  # the session starts and waits for its first message
        for _ in range(rounds):
            for kind, rt in runtimes.items():
                await turn(rt, sids[kind], series[kind])

    try:
        asyncio.run(main())
    finally:
        for rt in runtimes.values():
            rt.close()
    instant, waiting, unsafe = series["instant"], series["waiting"], series["unsafe"]
    said = series["text"]
    value, baseline = median(instant.per_step), median(instant.floor)
    yield measurement("step_overhead.step", value, "s/step", baseline=baseline, steps=steps)
    yield measurement("step_overhead.reserved", value, "s/step", baseline=median(instant.reserved))
    yield measurement(
        "step_overhead.fsyncs", median(instant.fsyncs), "fsyncs/step", baseline=ACTIONS_PER_STEP
    )
    yield measurement("step_overhead.bytes", median(instant.written), "bytes/step")
    yield measurement(
        "step_overhead.waiting", median(waiting.per_step), "s/step",
        baseline=median(waiting.floor), fsyncs=median(waiting.fsyncs), steps=steps,
    )  # fmt: skip
    yield measurement(
        "step_overhead.text", median(said.per_step), "s/step", baseline=median(said.floor),
        fsyncs=median(said.fsyncs), bytes=median(said.written), steps=steps,
    )  # fmt: skip
    yield measurement(
        "step_overhead.unsafe", median(unsafe.per_step), "s/step", baseline=value,
        fsyncs=median(unsafe.fsyncs), steps=steps,
    )  # fmt: skip


def run(quick: bool) -> Iterator[dict[str, Any]]:
    with scratch("step") as root:
        yield from measure(root, 20 if quick else 1000)
