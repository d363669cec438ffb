"""`GET /session/{id}` of a long session from `eve start`, on a local world and on PostgreSQL.

A session of ``LARGE`` completed turns and one of ``SMALL`` (as ``resume_flat`` builds them:
user message ~200 characters, reply ~300) in one world; then `eve start --port 0` serves it,
in its own process, and a client asks for each session's view in turn.

* ``session_get.<world>.first``: seconds of the first `GET /session/{id}` of the ``LARGE``
  session after the server started (it has read nothing of it: its latest fold checkpoint
  and the events since), ``baseline``: the ``SMALL`` one's first.
* ``session_get.<world>``: seconds of a later one (median), ``baseline``: the ``SMALL``
  one's. Target (issue 33): ≤ 20 ms for ``LARGE`` = 2,000 turns.

``<world>`` is ``local`` and ``postgres`` (`EVE_BENCH_POSTGRES`, as the ``postgres``
benchmark; skipped when no server answers).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from . import measurement
from ._support import median, no_fsync, scratch

PREFIX = "/eve/v1"


def _serve(agent: Path, world: str) -> tuple[subprocess.Popen[str], str]:
    script = Path(sys.executable).parent / "eve"
    eve = [str(script)] if script.exists() else [sys.executable, "-m", "eve_cli"]
    proc = subprocess.Popen(
        [*eve, "start", "--port", "0", "--agent", str(agent), "--world", world],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=agent.parent,
        env={k: v for k, v in os.environ.items() if k != "EVE_AUTH_TOKEN"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "eve start: serving http://127.0.0.1:PORT (...)"
    for word in line.split():
        if word.startswith("http://"):
            return proc, word.rstrip(",")
    proc.kill()
    proc.wait()
    raise RuntimeError(f"eve start did not announce its address: {line!r}")


def _measure(
    root: Path, name: str, world: str | None, small: int, large: int, rounds: int
) -> Iterator[dict[str, Any]]:
    from .resume_flat import build

    with no_fsync():  # the fixture: 2,000 turns of fsyncs would take minutes
        _, data, big = build(root / "large", large, 1, world=world)
        agent, _, little = build(root / "small", small, 1, world=world or str(data))
    proc, url = _serve(agent, world or str(data))
    times: dict[str, list[float]] = {big: [], little: []}
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            for _ in range(rounds + 1):  # the first of each: the server has read nothing
                for sid in (big, little):
                    started = time.perf_counter()
                    response = client.get(f"{PREFIX}/session/{sid}")
                    times[sid].append(time.perf_counter() - started)
                    if response.status_code != 200 or not response.json()["turns"]:
                        raise RuntimeError(f"GET /session/{sid}: {response.status_code}")
    finally:
        proc.terminate()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    sizes = [small, large]
    yield measurement(
        f"session_get.{name}.first", times[big][0], "s", baseline=times[little][0], turns=sizes
    )
    yield measurement(
        f"session_get.{name}",
        median(times[big][1:]),
        "s",
        baseline=median(times[little][1:]),
        turns=sizes,
    )


def run(quick: bool) -> Iterator[dict[str, Any]]:
    small, large = (3, 30) if quick else (20, 2000)
    rounds = 3 if quick else 15
    with scratch("session-get") as root:
        yield from _measure(root / "local", "local", None, small, large, rounds)
    try:
        from .postgres_bench import schema

        with schema() as (url, _), scratch("session-get-pg") as root:
            yield from _measure(root, "postgres", url, small, large, rounds)
    except ImportError:
        return
