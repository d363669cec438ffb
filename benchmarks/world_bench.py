"""World benchmark: durable step overhead vs the append+fsync floor, files per run, resume cost.

* `world.step_overhead`: seconds per no-op durable step (a fresh run of 50 steps, minus a run
  of none), against `baseline` = one write+fdatasync of the same bytes to a file in the same
  directory, measured right after; medians over rounds (1,000 steps in all). SPEC §11:
  ratio ≤ 3 (goal 1.5).
* `world.files`: files in the data directory after a run of 1,000 steps, against 10 steps.
* `world.resume`: seconds to resume a long-lived run (a fresh engine in the same process
  takes one delivery: load, replay, one step, park) with 2,000 completed steps, against 20.
  The run continues as new every 10 deliveries, as the session driver does.
* `world.reopen`: the same with nothing to do (take the lease, load, find nothing runnable).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from world import Engine, LocalWorld, WorkflowContext

from . import measurement


def _noop() -> None:
    return None


async def _steps(ctx: WorkflowContext, n: int) -> int:
    for _ in range(n):
        await ctx.step("noop", _noop)
    return n


async def _driver(ctx: WorkflowContext, state: dict[str, int]) -> None:
    hook = ctx.create_hook("bench") if state["done"] == 0 else ctx.hook("bench")
    while True:
        message = await hook.receive()
        state = {"done": state["done"] + 1, "total": state["total"] + int(message)}
        await ctx.step("apply", _noop)
        if state["done"] % 10 == 0:
            ctx.continue_as_new(state)


def _run_steps(path: Path, n: int, run_id: str) -> float:
    engine = Engine(LocalWorld(path), {"steps": _steps})
    rid = asyncio.run(engine.start("steps", n, run_id=run_id))
    started = time.perf_counter()
    asyncio.run(engine.run(rid))
    return time.perf_counter() - started


def _step_frames(path: Path, run_id: str) -> list[bytes]:
    frames = []
    with open(path / "runs" / run_id / "journal.msgpack", "rb") as f:
        for frame in msgpack.Unpacker(f, raw=False):
            frames.append(msgpack.packb(frame, use_bin_type=True))
    return frames[2:-1]  # the step records: not the header, start or done


def _floor(folder: Path, frames: list[bytes]) -> float:
    """Seconds per write+fdatasync of each frame, appended to a fresh file."""
    fd = os.open(folder / "floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        started = time.perf_counter()
        for frame in frames:
            os.write(fd, frame)
            os.fdatasync(fd)
        return (time.perf_counter() - started) / len(frames)
    finally:
        os.close(fd)


def step_overhead(root: Path, n: int, chunk: int) -> dict[str, Any]:
    # Runs of `chunk` steps alternate with floor measurements, so disk noise (other
    # processes, writeback) hits both sides alike; medians over the rounds.
    per_step, floor = [], []
    for i in range(max(n // chunk, 1)):
        base = root / f"overhead{i}"
        _run_steps(base, 0, "warm")  # the store's creation (FORMAT, folders) is no run's cost
        # A run's fixed cost: the least of three, so that one slow moment does not make the
        # steps look free (or cost less than nothing) on a loaded machine.
        empty = min(_run_steps(base, 0, f"empty{k}") for k in range(3))
        full = _run_steps(base, chunk, "full")
        per_step.append((full - empty) / chunk)
        floor.append(_floor(base, _step_frames(base, "full")))
    value, baseline = statistics.median(per_step), statistics.median(floor)
    return measurement("world.step_overhead", value, "s/step", baseline=baseline, steps=n)


def _count_files(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file())


def files(root: Path, small: int, large: int) -> dict[str, Any]:
    _run_steps(root / "files-small", small, "small")
    _run_steps(root / "files-large", large, "large")
    value, baseline = _count_files(root / "files-large"), _count_files(root / "files-small")
    return measurement("world.files", value, "files", baseline=baseline, steps=[small, large])


def _build_driver(path: Path, deliveries: int) -> tuple[Engine, str]:
    engine = Engine(LocalWorld(path), {"driver": _driver})
    rid = asyncio.run(engine.start("driver", {"done": 0, "total": 0}, run_id="driver"))

    async def feed() -> None:
        await engine.run(rid)
        for i in range(deliveries):
            await engine.resume_hook("bench", i)
            await engine.run(rid)

    asyncio.run(feed())
    return engine, rid


def _resume_time(path: Path, rounds: int) -> tuple[float, float]:
    """Median seconds to resume with one delivery, and to reopen with nothing to do."""
    resumes, reopens = [], []
    for i in range(rounds):
        engine = Engine(LocalWorld(path), {"driver": _driver})
        asyncio.run(engine.resume_hook("bench", i))
        started = time.perf_counter()
        asyncio.run(engine.run("driver"))
        resumes.append(time.perf_counter() - started)
        engine = Engine(LocalWorld(path), {"driver": _driver})
        started = time.perf_counter()
        asyncio.run(engine.run("driver"))
        reopens.append(time.perf_counter() - started)
    return statistics.median(resumes), statistics.median(reopens)


def resume(root: Path, small: int, large: int, rounds: int) -> Iterator[dict[str, Any]]:
    _build_driver(root / "resume-small", small)
    _build_driver(root / "resume-large", large)
    resume_small, reopen_small = _resume_time(root / "resume-small", rounds)
    resume_large, reopen_large = _resume_time(root / "resume-large", rounds)
    sizes = [small, large]
    yield measurement("world.resume", resume_large, "s", baseline=resume_small, steps=sizes)
    yield measurement("world.reopen", reopen_large, "s", baseline=reopen_small, steps=sizes)


def run(quick: bool) -> Iterator[dict[str, Any]]:
    # In the working directory, where `.workflow-data` would live (not a tmpfs /tmp).
    where = os.environ.get("EVE_BENCH_DIR") or os.getcwd()
    with tempfile.TemporaryDirectory(prefix="eve-world-bench-", dir=where) as tmp:
        root = Path(tmp)
        yield step_overhead(root, 50 if quick else 1000, 50)
        yield files(root, 10, 100 if quick else 1000)
        yield from resume(root, 20, 200 if quick else 2000, 3 if quick else 15)
