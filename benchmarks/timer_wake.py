"""A sleep put to sleep by another process, woken by a running `eve start` among many parked
sessions: how late, and what waiting for such sleeps costs the server.

The store holds ``N`` sessions parked on approvals (`parked_sessions.build`); a real
`eve start` serves it. This process then starts a session of a sleeper agent, drives it until
its turn sleeps (1 s) and lets it go, as an `eve chat` that exits would: the server learns of
the timer only through the world (`Runtime.wait_timers`, `timers_since`), then reads that
session's head.

* ``timer_wake.late``: median seconds from a sleep's due time (its timer, exact) to its turn
  done in the server (the woken turn's drive and a look every 20 ms included); before the
  notices, a server found such a sleep at its next read of every timer, up to 30 s later.
* ``timer_wake.scan``: median seconds of `Runtime.timers()` over the ``N`` sessions: what a
  read of every timer costs (at start, every 600 s, and after a notice the world cannot
  name sessions for).
* ``timer_wake.idle_cpu``: CPU seconds the server used per wall second while ``N`` sessions
  were parked and nothing happened (no polling: the watch waits on a change notification).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from . import measurement
from ._support import call, median, scratch, write_agent
from .parked_sessions import build
from .server_throughput import _serve

ROUNDS = 3
IDLE_S = 5.0


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _asleep(agent: Path, data: Path) -> tuple[str, float]:
    """A session of ``agent`` whose turn sleeps, driven here and let go: (id, due time)."""
    from eve_cli.runtime import Runtime

    async def main() -> tuple[str, float]:
        rt = Runtime(data_dir=data, agent_dir=agent)
        try:
            sid = await rt.create_session()
            await rt.deliver(sid, "nap")
            view = await rt.drive(sid)
            if view["parkedOn"] != "sleep":
                raise RuntimeError(f"the sleeper did not sleep: {view['status']}")
            return sid, rt.timers(sid)[sid]  # exact: `wakeAt` is said to the second
        finally:
            rt.close()

    return asyncio.run(main())


def _done_after(agent: Path, data: Path, sid: str, due: float) -> float:
    """Seconds from ``due`` until the server has finished the woken turn, looked at every
    20 ms through the store (`GET /session/{id}` adds the session's lineage: a read of every
    head, 1.5-2.3 s over 10,000 sessions)."""
    from eve_cli.runtime import Runtime

    rt = Runtime(data_dir=data, agent_dir=agent)
    try:
        deadline = time.time() + 60
        while rt.session(sid)["status"] != "waiting":
            if time.time() > deadline:
                raise RuntimeError(f"session {sid} was not woken within 60 s of its due time")
            time.sleep(0.02)
        return time.time() - due
    finally:
        rt.close()


def _scan(agent: Path, data: Path, n: int) -> float:
    from eve_cli.runtime import Runtime

    rt = Runtime(data_dir=data, agent_dir=agent)
    try:
        times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            rt.timers()
            times.append(time.perf_counter() - started)
        return median(times)
    finally:
        rt.close()


def run(quick: bool) -> Iterator[dict[str, Any]]:
    n = 20 if quick else 10_000
    with scratch("timers") as root:
        parked_agent, data, _ = build(root, n)
        script: list[dict[str, Any]] = [
            {"text": "", "tool_calls": [call("sleep", seconds=1.0)]},
            {"text": "awake", "tool_calls": []},
        ]
        sleeper = write_agent(root / "sleeper", script, sleep=True)
        yield measurement("timer_wake.scan", _scan(parked_agent, data, n), "s", sessions=n)
        proc, url = _serve(sleeper, data)
        try:
            httpx.get(f"{url}/eve/v1/sessions", timeout=60).raise_for_status()  # settled in
            before, began = _cpu(proc.pid), time.monotonic()
            time.sleep(1.0 if quick else IDLE_S)
            idle = (_cpu(proc.pid) - before) / (time.monotonic() - began)
            yield measurement("timer_wake.idle_cpu", idle, "cpu s/s", sessions=n)
            late = [_done_after(sleeper, data, *_asleep(sleeper, data)) for _ in range(ROUNDS)]
            yield measurement(
                "timer_wake.late", median(late), "s", sessions=n, rounds=[round(x, 3) for x in late]
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            if proc.stdout is not None:
                proc.stdout.close()
