"""kill -9 at named fault points and at seeded random moments, then resume in a new process.

After the resume: steps committed before the kill never ran again, the step in flight ran
again, the result equals an uninterrupted run's, and the journal reads cleanly.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest

from world import _journal

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

JOB = str(Path(__file__).with_name("crash_job.py"))
STEPS = 12


def _job(data: Path, effects: Path, faults: str = "") -> subprocess.Popen[str]:
    env = dict(os.environ, EVE_FAULTS=faults)
    return subprocess.Popen(
        [sys.executable, JOB, str(data), str(effects), str(STEPS)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def _finish(data: Path, effects: Path) -> dict[str, Any]:
    proc = _job(data, effects)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    assert result["status"] == "completed"
    return result


def _effects(effects: Path) -> Counter[int]:
    return (
        Counter(int(line) for line in effects.read_text().split())
        if effects.exists()
        else Counter()
    )


def _journal_ok(data: Path) -> list[dict[str, Any]]:
    path = data / "runs" / "job" / "journal.msgpack"
    result = _journal.read_file(str(path))
    assert not result.torn and result.end == path.stat().st_size
    with open(path, "rb") as f:
        assert all(frame[0] == 1 for frame in msgpack.Unpacker(f, raw=False))
    return [rec for _, rec in result.records]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The result of an uninterrupted run."""
    base = tmp_path_factory.mktemp("reference")
    result = _finish(base / "data", base / "effects")
    assert _effects(base / "effects") == Counter([*range(STEPS), 1000 + STEPS // 2])
    return result


def _expected_effects() -> Counter[int]:
    return Counter([*range(STEPS), 1000 + STEPS // 2])


@pytest.mark.parametrize(
    "faults",
    [
        "crash_before_write@1",  # the run's creation itself
        "crash_before_write@4",
        "crash_before_write@9",  # around the child's start and result
        "crash_mid_write@5",
        "crash_mid_write@10",
        "crash_after_fsync@3",
        "crash_after_fsync@11",
    ],
)
def test_kill_at_a_fault_point_then_resume(
    tmp_path: Path, reference: dict[str, Any], faults: str
) -> None:
    data, effects = tmp_path / "data", tmp_path / "effects"
    proc = _job(data, effects, faults)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    before = _effects(effects)
    journal = data / "runs" / "job" / "journal.msgpack"
    committed = set()
    if journal.exists():  # torn after a mid-write kill: read what is complete
        records = _journal.read_file(str(journal)).records
        committed = {r["name"] for _, r in records if r.get("t") == "step"}
    assert _finish(data, effects) == reference
    after = _effects(effects)
    reran = after - _expected_effects()
    # Only a step that ran without its record becoming durable may run twice, and only once.
    assert sum(reran.values()) <= 1
    for i in reran:
        name = f"s{i}" if i < 1000 else "sub"
        assert name not in committed and before[i] == 1
    if faults.startswith("crash_after_fsync"):
        assert not reran  # the record was durable: nothing runs again
    if faults in ("crash_before_write@4", "crash_mid_write@5"):
        assert sum(reran.values()) == 1  # those writes are step records: that step reruns
    assert +(_expected_effects() - after) == Counter()
    _journal_ok(data)


@pytest.mark.parametrize("seed", range(4))
def test_kill_at_a_random_moment_then_resume(
    tmp_path: Path, reference: dict[str, Any], seed: int
) -> None:
    rng = random.Random(seed)
    data, effects = tmp_path / "data", tmp_path / "effects"
    for _ in range(2):  # two kills in a row, then a clean finish
        proc = _job(data, effects)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.03))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert _finish(data, effects) == reference
    after = _effects(effects)
    assert sum((after - _expected_effects()).values()) <= 2
    assert +(_expected_effects() - after) == Counter()
    _journal_ok(data)
