"""Many `eve start` workers on one PostgreSQL world: throughput, and takeover after a failure.

Needs a server (`EVE_BENCH_POSTGRES`, as the ``postgres`` benchmark); a schema per measurement.

* ``workers.steps_per_s.<W>`` (W = 1, 2, 4 workers, each its own process; 1, 2 with
  ``--quick``): ``SESSIONS`` sessions, client ``i`` (its own connections) talking to worker
  ``i mod W`` only (any worker serves any session), turn after turn (one step each), as
  ``server_throughput``; ``latency_p50.<W>`` / ``latency_p99.<W>``: a posted message to its
  ``turn.completed`` on the client's stream.
* ``workers.takeover_kill``: seconds from SIGKILL of the worker driving a turn to another
  worker holding the session's lease (median of ``TAKEOVERS``); ``workers.takeover_stop``: the
  same after SIGSTOP, with a 1 s lease (what it measures is the lease, plus the sweep).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from . import measurement
from ._support import median, percentile, scratch, text, write_agent
from .postgres_bench import schema, server
from .server_throughput import REPLY_CHARS, _client

SESSIONS, TURNS, TAKEOVERS = 8, 10, 10


def _worker(agent: Path, url: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "start", "--port", "0", "--agent", str(agent),
         "--world", url],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=agent.parent,
        env={k: v for k, v in os.environ.items() if k != "EVE_AUTH_TOKEN"},
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    for word in line.split():
        if word.startswith("http://"):
            return proc, word.rstrip(",")
    proc.kill()
    proc.wait()
    raise RuntimeError(f"eve start did not announce its address: {line!r}")


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


async def _spread(urls: list[str], sessions: int, turns: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    ready = asyncio.Barrier(sessions + 1)
    runs = [
        asyncio.create_task(_client(urls[i % len(urls)], turns, random.Random(i), ready, latencies))
        for i in range(sessions)
    ]
    await ready.wait()
    started = time.perf_counter()
    counts = await asyncio.gather(*runs)
    elapsed = time.perf_counter() - started
    return sum(counts) / elapsed, latencies


def _owner(name: str, sid: str) -> str | None:
    import psycopg

    with psycopg.connect(server(), autocommit=True) as conn:
        row = conn.execute(
            f'SELECT owner FROM "{name}".families WHERE root = %s AND lease_until > now()', [sid]
        ).fetchone()
    return str(row[0]) if row and row[0] else None


def _takeover(root: Path, how: signal.Signals) -> float:
    """One takeover: a turn driven by a first worker, a second started, then `how` sent to
    the first; seconds until the second holds the lease."""
    script = [{"text": "thinking", "tool_calls": [], "delay": 60.0}] * 2
    agent = write_agent(root / "agent", script)
    with schema() as (url, name):
        url += "&lease=1"
        first, first_url = _worker(agent, url)
        procs = [first]
        try:
            sid = httpx.post(
                f"{first_url}/eve/v1/session", json={"message": "go"}, timeout=60
            ).json()["sessionId"]
            deadline = time.monotonic() + 60
            while (owner := _owner(name, sid)) is None and time.monotonic() < deadline:
                time.sleep(0.01)
            procs.append(_worker(agent, url)[0])
            first.send_signal(how)
            sent = time.monotonic()
            while _owner(name, sid) in (owner, None) and time.monotonic() - sent < 60:
                time.sleep(0.005)
            return time.monotonic() - sent
        finally:
            _stop(procs)


def run(quick: bool) -> Iterator[dict[str, Any]]:
    sessions, turns, takeovers = (2, 2, 1) if quick else (SESSIONS, TURNS, TAKEOVERS)
    levels = (1, 2) if quick else (1, 2, 4)
    rng = random.Random(1)
    script = [{"text": text(rng, REPLY_CHARS), "tool_calls": []} for _ in range(turns)]
    with scratch("workers") as root:
        for workers in levels:
            # A deployment of its own per store: a worker refuses another store than the one
            # its agent folder last joined.
            agent = write_agent(root / f"agent{workers}", script)
            with schema() as (url, _):
                procs, urls = [], []
                try:
                    for _ in range(workers):
                        proc, address = _worker(agent, url)
                        procs.append(proc)
                        urls.append(address)
                    rate, latencies = asyncio.run(_spread(urls, sessions, turns))
                finally:
                    _stop(procs)
            yield measurement(f"workers.steps_per_s.{workers}", rate, "steps/s",
                              sessions=sessions)  # fmt: skip
            yield measurement(f"workers.latency_p50.{workers}", median(latencies), "s")
            yield measurement(f"workers.latency_p99.{workers}", percentile(latencies, 99), "s")
        for how, label in ((signal.SIGKILL, "kill"), (signal.SIGSTOP, "stop")):
            times = [_takeover(root / f"{label}{i}", how) for i in range(takeovers)]
            yield measurement(
                f"workers.takeover_{label}", median(times), "s", runs=takeovers,
                slowest=round(max(times), 3),
            )  # fmt: skip
