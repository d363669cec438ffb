"""Wall time of short CLI commands in a new process (what a user waits for).

The ``eve`` console script next to this interpreter is run (``python -m eve_cli`` when there is
none); ``baseline`` is a bare ``python -c pass`` on the same interpreter, the floor any Python
command pays. Medians over rounds.

* ``cli_startup.version``: ``eve --version`` (SPEC §11: ≤ 0.3 s).
* ``cli_startup.inspect``: ``eve inspect`` on an empty data directory (when the command exists).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import median, scratch


def eve_command() -> list[str]:
    script = Path(sys.executable).parent / "eve"
    return [str(script)] if script.exists() else [sys.executable, "-m", "eve_cli"]


def wall(command: list[str], env: dict[str, str], cwd: Path, rounds: int) -> tuple[float, int]:
    """Median wall seconds of ``command`` and its last exit code."""
    times, code = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        code = subprocess.run(
            command, env=env, cwd=cwd, capture_output=True, check=False
        ).returncode
        times.append(time.perf_counter() - started)
    return median(times), code


def run(quick: bool) -> Iterator[dict[str, Any]]:
    rounds = 3 if quick else 15
    with scratch("cli") as root:
        env = {**os.environ, "EVE_DATA_DIR": str(root / "data")}
        floor, _ = wall([sys.executable, "-c", "pass"], env, root, rounds)
        eve = eve_command()
        version, code = wall([*eve, "--version"], env, root, rounds)
        if code != 0:
            raise RuntimeError(f"{' '.join(eve)} --version exited {code}")
        yield measurement("cli_startup.version", version, "s", baseline=floor)
        inspect, code = wall([*eve, "inspect"], env, root, rounds)
        if code == 0:
            yield measurement("cli_startup.inspect", inspect, "s", baseline=floor)
