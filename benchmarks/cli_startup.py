"""Wall time of short CLI commands in a new process (what a user waits for), and their CPU.

The ``eve`` console script next to this interpreter is run (``python -m eve_cli`` when there is
none); ``baseline`` is a bare ``python -c pass`` on the same interpreter, the floor any Python
command pays. Medians over rounds; ``cpu`` is the median user + system seconds of the process
(what a loaded machine, or a test suite starting many processes, pays: mostly imports).

* ``cli_startup.version``: ``eve --version`` (SPEC §11: ≤ 0.3 s).
* ``cli_startup.inspect``: ``eve inspect`` on an empty data directory.
* ``cli_startup.chat_print``: ``eve chat -m demo -p TEXT`` (a new session and one turn, durable).
* ``cli_startup.chat_piped``: ``eve chat -m demo`` with two messages on stdin (what the chaos
  suite runs, less its agent folder).
* The read-only commands on the example data (`.workflow-data.example`, a copy), each with its
  CPU (SPEC §11: ≤ 0.25 s): ``cli_startup.help`` (``eve --help``), ``.inspect_list`` (``eve
  inspect``), ``.inspect_session`` (``eve inspect SID``), ``.log`` (``eve log SID``),
  ``.schedules`` (``eve schedules``). Every command is timed with the bytecode caches an
  installed eve has (``PYTHONDONTWRITEBYTECODE`` is dropped; one untimed run writes them).

``EVE_BENCH_AGAINST=DIR`` (a checkout of another commit, e.g. ``git worktree add DIR 2473f03``)
runs each command of that tree too (``python -m eve_cli`` with ``PYTHONPATH=DIR``, same
interpreter and packages), rounds alternated with this tree's, and adds its medians and the
ratio: ``against_cpu``, ``cpu_ratio``.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import median, scratch

PIPED = "hello\nwhat time is it?\n"
EXAMPLE = Path(__file__).resolve().parents[1] / ".workflow-data.example"


def eve_command() -> list[str]:
    script = Path(sys.executable).parent / "eve"
    return [str(script)] if script.exists() else [sys.executable, "-m", "eve_cli"]


def wall(
    command: list[str], env: dict[str, str], cwd: Path, rounds: int, stdin: str = ""
) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds of ``command``; raises if it fails."""
    times, cpus = [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(
            command, env=env, cwd=cwd, input=stdin.encode(), capture_output=True, check=False
        )
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}: {proc.stderr!r}")
    return median(times), median(cpus)


def run(quick: bool) -> Iterator[dict[str, Any]]:
    rounds = 3 if quick else 15
    against = os.environ.get("EVE_BENCH_AGAINST")
    with scratch("cli") as root:
        # With the bytecode caches an installed eve has (pip compiles them; a checkout writes
        # them on first use): a session's PYTHONDONTWRITEBYTECODE would time the compiler.
        env = {**os.environ, "EVE_DATA_DIR": str(root / "empty")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        floor, floor_cpu = wall([sys.executable, "-c", "pass"], env, root, rounds)
        eve = eve_command()
        cases: list[tuple[str, list[str], str]] = [
            ("version", ["--version"], ""),
            ("inspect", ["inspect"], ""),
            ("chat_print", ["--data", str(root / "data"), "chat", "-m", "demo", "-p", "hi"], ""),
            ("chat_piped", ["--data", str(root / "data"), "chat", "-m", "demo"], PIPED),
        ]
        for name, args, stdin in cases:
            seconds, cpu = wall([*eve, *args], env, root, rounds, stdin)
            yield measurement(
                f"cli_startup.{name}",
                seconds,
                "s",
                baseline=floor,
                cpu=round(cpu, 4),
                baseline_cpu=round(floor_cpu, 4),
            )
        yield from _read_only(root, env, rounds, against)


def _read_only(
    root: Path, env: dict[str, str], rounds: int, against: str | None
) -> Iterator[dict[str, Any]]:
    """The read-only commands on a copy of the example data, alternated with ``against``'s
    (on a copy of its own: `eve schedules` opens the store for writing, which may migrate it
    to a format the other tree refuses)."""
    data, theirs = root / "example", root / "example-against"
    shutil.copytree(EXAMPLE, data)
    shutil.copytree(EXAMPLE, theirs)
    sid = sorted(p.name for p in (data / "runs").iterdir())[0]
    ours = [sys.executable, "-m", "eve_cli"]
    other_env = {**env, "PYTHONPATH": against} if against else env
    cases: list[tuple[str, list[str]]] = [
        ("help", ["--help"]),
        ("inspect_list", ["--data", str(data), "inspect"]),
        ("inspect_session", ["--data", str(data), "inspect", sid]),
        ("log", ["--data", str(data), "log", sid]),
        ("schedules", ["--data", str(data), "schedules"]),
    ]
    for name, args in cases:
        their_args = [str(theirs) if a == str(data) else a for a in args]
        wall([*ours, *args], env, root, 1)  # writes the bytecode caches (of both trees)
        if against:
            wall([*ours, *their_args], other_env, root, 1)
        times, cpus, other = [], [], []
        for _ in range(rounds):
            seconds, cpu = wall([*ours, *args], env, root, 1)
            times.append(seconds)
            cpus.append(cpu)
            if against:
                other.append(wall([*ours, *their_args], other_env, root, 1)[1])
        extra: dict[str, Any] = {"cpu": round(median(cpus), 4)}
        if other:
            extra["against_cpu"] = round(median(other), 4)
            extra["cpu_ratio"] = round(median(cpus) / median(other), 3)
        yield measurement(f"cli_startup.{name}", median(times), "s", **extra)
