"""The chaos suite's thousand kills: forked workers SIGKILLed at random points (chaos_fork).

`CHAOS_SEED=<n>` replays a failing run; `CHAOS_FORK_KILLS` changes the number of kills
(default 1,000). Two worker processes share the kills (CI machines have two cores). The data
lives on /dev/shm where there is one: a SIGKILL leaves the page cache as it was, so what a kill
can break does not depend on the disk, and tmpfs spares the fsyncs' wait (power cuts are the
power-loss tests' business). The count and its kinds are printed on the terminal.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

WORKERS = 2
HERE = Path(__file__).absolute().parent


@pytest.mark.timeout(600)
def test_a_thousand_kills(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
    target = int(os.environ.get("CHAOS_FORK_KILLS") or 1000)
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    root = Path(tempfile.mkdtemp(prefix="eve-chaos-", dir=base))
    share = -(-target // WORKERS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    env.pop("EVE_FAULTS", None)
    try:
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "chaos_fork.py"),
                    str(root / f"w{w}"),
                    str(seed + w),
                    str(share),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for w in range(WORKERS)
        ]
        outputs = [worker.communicate(timeout=540) for worker in workers]
        failed = [
            err for worker, (_, err) in zip(workers, outputs, strict=True) if worker.returncode
        ]
        if failed:
            kept = tmp_path / "chaos-data"
            shutil.copytree(root, kept)
            raise AssertionError(
                f"{' | '.join(e.strip()[-3000:] for e in failed)} (data in {kept})"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    kills = sum(s["kills"] for s in summaries)
    kinds: dict[str, int] = {}
    for summary in summaries:
        for kind, count in summary["kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + count
    with capsys.disabled():
        print(
            f"\nchaos (forked) seed {seed}: {kills} SIGKILLs over "
            f"{sum(s['children'] for s in summaries)} workers, "
            f"{sum(s['sessions'] for s in summaries)} sessions: {dict(sorted(kinds.items()))}"
        )
    assert kills >= target, f"only {kills} kills (seed {seed})"
    # At random moments, inside tools, and at journal writes.
    assert kinds.get("time") and kinds.get("tool") and kinds.get("fault"), kinds
