"""The chaos suite's `eve` processes: at least 100 SIGKILLs of real `eve chat`, `resume` and
`start` processes per run, each restarted (the other thousand kills: test_chaos_forked).

`CHAOS_SEED=<n>` replays a failing run; `CHAOS_KILLS` changes the number of kills (default
100). The same runs on the PostgreSQL world (each session in a schema of its own), with
`CHAOS_PG_KILLS` kills (default 20: covering every kind of moment is the local run's job).
Sessions run two at a time (CI machines have two cores). The kills per kind of moment
(journal-write fault, tool execution, model streaming, random time, delivery in flight,
parked wait, settled) are printed, and a default-size run must contain every kind.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.chaos_support import (
    CATEGORIES,
    MESSAGES,
    TAGS,
    ChaosFailure,
    Run,
    check,
    transcript,
    write_agent,
)
from tests.pg_support import fresh_schema, require_server

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

WORKERS = 2


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    """The transcript of an uninterrupted run: one `eve chat` with every message."""
    root = tmp_path_factory.mktemp("reference")
    run = Run(root, seed=0)
    env = {**run.env, "PYTHONPATH": str(Path(__file__).absolute().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-m", "eve_cli", "chat", "--agent", str(write_agent(root)),
         "--approve", "all", "--json"],
        input="".join(m + "\n" for m in MESSAGES), capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run.sid = LocalSessions(run).only()
    assert run.finished()
    ref = transcript(run.events())
    assert [t for t in ref if t[0] == "message.received"] == [
        ("message.received", m) for m in MESSAGES
    ]
    results = [t for t in ref if t[0] == "action.result"]
    assert len(results) == len(TAGS) and all("recorded" in t[3] for t in results), results
    return ref


class LocalSessions:
    def __init__(self, run: Run) -> None:
        self.run = run

    def only(self) -> str:
        [sid] = [p.name for p in (self.run.data / "runs").iterdir()]
        return sid


@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["local", "postgres"])
def test_chaos(
    tmp_path: Path,
    reference: list[tuple[Any, ...]],
    capsys: pytest.CaptureFixture[str],
    backend: str,
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
    if backend == "postgres":
        require_server()
        target = int(os.environ.get("CHAOS_PG_KILLS") or 20)
    else:
        target = int(os.environ.get("CHAOS_KILLS") or 100)
    rng = random.Random(seed)
    seeds = [rng.randrange(1 << 30) for _ in range(200)]
    lock = threading.Lock()
    done: list[Run] = []

    def worker(first: int) -> None:
        # Sessions one after another until the kills of every finished session reach the
        # target (each session is replayable alone from its own seed).
        for i in range(first, len(seeds), WORKERS):
            with lock:
                if sum(len(r.kills) for r in done) >= target:
                    return
            run = Run(tmp_path / f"s{i}", seed=seeds[i])
            try:
                with contextlib.ExitStack() as stack:
                    if backend == "postgres":
                        run = Run(
                            run.root, seed=run.seed, world=stack.enter_context(fresh_schema())
                        )
                    run.drive()
                    check(run, reference)
            except Exception as exc:  # a harness error too: whatever broke, name the seed
                raise ChaosFailure(
                    f"chaos failed; replay with CHAOS_SEED={seed} (session {i}, seed "
                    f"{run.seed}, data in {run.root}): {exc!r}; processes: {run.log}"
                ) from None
            with lock:
                done.append(run)

    with ThreadPoolExecutor(WORKERS) as pool:
        for future in [pool.submit(worker, w) for w in range(WORKERS)]:
            future.result()
    kills = [k for run in done for k in run.kills]
    kinds = Counter(k.category for k in kills)
    with capsys.disabled():  # on the terminal: the count is what this suite promises
        print(
            f"\nchaos seed {seed}: {len(done)} sessions, {len(kills)} kills over "
            f"{sum(r.processes for r in done)} processes: {dict(sorted(kinds.items()))}"
        )
    assert len(kills) >= target, f"only {len(kills)} kills (seed {seed})"
    if target >= 100:  # a run of the default size hits every kind of moment
        missing = [c for c in CATEGORIES if not kinds[c]]
        assert not missing, f"no kill {missing} in this run (replay with CHAOS_SEED={seed})"
