"""Shared pieces of the runtime benchmarks: agent folders on the scripted model, scratch
directories on the real disk, file counting, fsync counting, medians."""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NOOP_TOOL = '''
from eve_cli import tool, always


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"


@tool(effects="unsafe")
def noop_unsafe() -> str:
    """Do nothing, never twice (its runs are journaled as they begin)."""
    return "ok"


@tool
def payload() -> str:
    """Return a tool result of about 365 characters."""
    return RESULT


RESULT = " ".join(["result"] * 52)[:365]


@tool(approval=always())
def deploy(target: str) -> str:
    """Deploy (asks the user first)."""
    return f"deployed {target}"
'''

_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "river",
    "stone",
    "cloud",
    "field",
    "light",
    "north",
    "south",
    "quiet",
    "rapid",
    "green",
    "amber",
    "silver",
    "window",
    "garden",
    "market",
    "letter",
    "number",
]


# A step with real payloads, as every peer benchmark was given (issue 32): about 730 bytes of
# model text and tool result a step, half each (`payload` returns the other half).
STEP_TEXT = " ".join(["answer"] * 52)[:365]


def text(rng: random.Random, chars: int) -> str:
    """Plain words, about ``chars`` characters long (deterministic for a seeded ``rng``)."""
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def write_agent(folder: Path, script: list[dict[str, Any]], **agent_args: Any) -> Path:
    """An agent folder whose model is ``scripted:<folder>/script.json``, with a no-op tool and
    an approval-gated ``deploy`` tool."""
    folder.mkdir(parents=True, exist_ok=True)
    script_path = folder / "script.json"
    script_path.write_text(json.dumps(script))
    args = "".join(f", {k}={v!r}" for k, v in agent_args.items())
    (folder / "agent.py").write_text(
        "from eve_cli import define_agent\n\n"
        f"agent = define_agent(model={f'scripted:{script_path}'!r}{args})\n"
    )
    (folder / "instructions.md").write_text("You are a benchmark agent.")
    (folder / "tools").mkdir(exist_ok=True)
    (folder / "tools" / "bench.py").write_text(NOOP_TOOL)
    return folder


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A scratch directory on the disk eve would use (``$EVE_BENCH_DIR`` or the working
    directory; /tmp may be a tmpfs where fsync costs nothing)."""
    where = os.environ.get("EVE_BENCH_DIR") or os.getcwd()
    os.makedirs(where, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"eve-bench-{prefix}-", dir=where) as tmp:
        yield Path(tmp)


def disk_usage(path: Path) -> tuple[int, int]:
    """(bytes, files) of every regular file under ``path``."""
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            total += os.stat(os.path.join(root, name)).st_size
            files += 1
    return total, files


class FsyncCounter:
    """Counts ``os.fsync`` / ``os.fdatasync`` calls made in this process while active."""

    def __init__(self) -> None:
        self.count = 0

    @contextlib.contextmanager
    def active(self) -> Iterator[FsyncCounter]:
        real_fsync, real_fdatasync = os.fsync, os.fdatasync

        def fsync(fd: Any) -> None:
            self.count += 1
            real_fsync(fd)

        def fdatasync(fd: Any) -> None:
            self.count += 1
            real_fdatasync(fd)

        os.fsync, os.fdatasync = fsync, fdatasync
        try:
            yield self
        finally:
            os.fsync, os.fdatasync = real_fsync, real_fdatasync


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    """Skip ``os.fsync`` / ``os.fdatasync`` while active: for building a benchmark's fixture
    data faster (the files written are the same; only a power cut could tell the
    difference). Never around what a benchmark measures."""
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def skip(fd: Any) -> None:
        return None

    os.fsync, os.fdatasync = skip, skip
    try:
        yield
    finally:
        os.fsync, os.fdatasync = real_fsync, real_fdatasync


def append_floor(folder: Path, sizes: list[int], *, reserved: bool = False) -> float:
    """Seconds to append chunks of ``sizes`` bytes to a fresh file, each write followed by
    ``fdatasync``: the physical floor of durable appends on this disk. ``reserved``: into
    space allocated beforehand (``posix_fallocate``), as eve's journals write."""
    fd = os.open(folder / "floor.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if reserved and hasattr(os, "posix_fallocate"):  # Linux (where eve reserves)
            os.posix_fallocate(fd, 0, sum(sizes))
            os.fdatasync(fd)
        started, at = time.perf_counter(), 0
        for size in sizes:
            os.pwrite(fd, b"x" * size, at)
            os.fdatasync(fd)
            at += size
        return time.perf_counter() - started
    finally:
        os.close(fd)
        os.unlink(folder / "floor.bin")


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]
