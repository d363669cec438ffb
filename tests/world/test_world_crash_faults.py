"""Every `EVE_FAULTS` point, in a real process driving a real workflow on a `LocalWorld`.

The workflow's steps append their name to an effects file. Each case runs the workflow in a
subprocess with one fault armed at one journal write (or read), then runs it again without
faults, and checks: the run completes with the right result, every step's effect happened
once — except the one step whose record the fault destroyed, which may run once more — and
every file verifies clean.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from world.stores.local import verify as _verify

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

STEPS = 4
SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from world import Engine, LocalWorld, NoActiveRunError, StorageError

    data, effects = sys.argv[1], sys.argv[2]

    def effect(name):
        with open(effects, "a") as f:
            f.write(name + "\\n")
        return name

    async def flow(ctx, n):
        done = []
        for i in range(n):
            done.append(await ctx.step(f"s{i}", effect, f"s{i}"))
            if i == 1:
                done.append(await ctx.create_hook("t-fault").receive())
        return done

    async def main():
        engine = Engine(LocalWorld(data), {"flow": flow})
        runs = engine.world.families()
        rid = runs[0] if runs else await engine.start("flow", STEPS, run_id="faulty")
        info = await engine.run(rid)
        if info.status == "parked":
            try:
                await engine.resume_hook("t-fault", "hooked")
            except NoActiveRunError as exc:  # delivered already by an earlier attempt
                print("resume:", type(exc).__name__, file=sys.stderr)
            info = await engine.run(rid)
        print(info.status, info.result)

    try:
        asyncio.run(main())
    except StorageError as exc:
        print("StorageError:", exc, file=sys.stderr)
        sys.exit(3)
    """
).replace("STEPS", str(STEPS))
REPO = Path(__file__).absolute().parents[2]  # subprocesses import this checkout
EXPECTED = "completed ['s0', 's1', 'hooked', 's2', 's3']"


def _run(tmp: Path, faults: str) -> subprocess.CompletedProcess[str]:
    script = tmp / "flow.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "EVE_FAULTS": faults, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(script), str(tmp / "data"), str(tmp / "effects")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _effects(tmp: Path) -> list[str]:
    path = tmp / "effects"
    return path.read_text().split() if path.exists() else []


def _uninterrupted_writes(tmp: Path) -> int:
    """How many durable writes a clean run makes (crash_after_fsync@N past the end never fires)."""
    for n in range(1, 40):
        case = tmp / f"probe{n}"
        case.mkdir()
        if _run(case, f"crash_after_fsync@{n}").returncode == 0:
            return n - 1
    raise AssertionError("the workflow never finished")


@pytest.fixture(scope="module")
def writes(tmp_path_factory: pytest.TempPathFactory) -> int:
    return _uninterrupted_writes(tmp_path_factory.mktemp("probe"))


@pytest.mark.parametrize("fault", ["crash_before_write", "crash_mid_write", "crash_after_fsync"])
def test_a_kill_at_any_write_resumes_with_no_step_repeated_but_the_one_in_flight(
    tmp_path: Path, writes: int, fault: str
) -> None:
    assert writes >= STEPS + 3
    for n in range(1, writes + 1):
        case = tmp_path / f"{fault}-{n}"
        case.mkdir()
        crashed = _run(case, f"{fault}@{n}")
        assert crashed.returncode == -signal.SIGKILL, (n, crashed.stderr)
        assert not [f for f in _verify.verify(case / "data") if f.error], n
        before = _effects(case)
        resumed = _run(case, "")
        assert resumed.returncode == 0 and resumed.stdout.strip() == EXPECTED, (n, resumed)
        after = _effects(case)
        assert sorted(set(after)) == [f"s{i}" for i in range(STEPS)]
        repeats = [name for name in set(after) if after.count(name) > 1]
        if fault == "crash_after_fsync":
            assert repeats == [], (n, after)  # the record was durable: nothing runs again
        else:
            # Only the step whose result record was being written when the process died.
            assert len(repeats) <= 1 and all(after.count(r) == 2 for r in repeats), (n, after)
            assert not repeats or before[-1] == repeats[0], (n, before, after)
        assert all(f.ok for f in _verify.verify(case / "data") if f.kind != "lock"), n


@pytest.mark.parametrize("fault", ["enospc", "eio_write", "eio_read"])
def test_a_disk_error_is_one_clear_line_and_the_next_run_completes(
    tmp_path: Path, writes: int, fault: str
) -> None:
    for n in (1, 3, writes) if fault != "eio_read" else (1, 2, 3):
        case = tmp_path / f"{fault}-{n}"
        case.mkdir()
        failed = _run(case, f"{fault}@{n}")
        assert failed.returncode == 3, (n, failed.stderr)
        line = failed.stderr.strip().splitlines()[-1]
        assert line.startswith("StorageError:") and "Traceback" not in failed.stderr
        assert str(case / "data") in line, line
        # The file written to was rolled back: no torn tail, no damage (at most a leftover
        # of a run creation that failed, which the next start replaces).
        assert not [f for f in _verify.verify(case / "data") if f.error or f.state == "torn"]
        resumed = _run(case, "")
        assert resumed.returncode == 0 and resumed.stdout.strip() == EXPECTED, (n, resumed)
        after = _effects(case)
        assert len(after) - len(set(after)) <= 1, (n, after)
