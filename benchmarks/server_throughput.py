"""`eve start` under concurrent sessions over HTTP: throughput and delivery latency.

``eve start --port 0`` runs in its own process on the scripted model (every reply one step, no
tools). For each level of concurrency C, C clients each create a session, follow its NDJSON
event stream and, turn after turn, post a message and wait for that turn's ``turn.completed``
on the stream. Every turn is one step. Each client has its own HTTP connections, as separate
users do: with one connection pool shared by 100 sessions the benchmark's own process spent
more CPU than the server (5.2 s against 3.0 s for 300 turns on the 2-core machine, the pool
looking through every connection at each request), and measured itself.

* ``server_throughput.steps_per_s.<C>``: steps per second over all C sessions, timed from the
  moment every session exists and has its stream open (creating them is not counted).
* ``server_throughput.latency_p50.<C>`` / ``latency_p99.<C>``: seconds from posting a message
  to its ``turn.completed`` event reaching the client.
* ``server_throughput.scaling``: steps per second at the highest C against C = 1 (``ratio``):
  well above 1 when durable writes of concurrent sessions overlap (group commit) and the
  server has CPU to spare, about 1 when they are serialized or its process is busy.
"""

from __future__ import annotations

import asyncio
import json
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

PREFIX = "/eve/v1"
USER_CHARS, REPLY_CHARS = 200, 300


def _serve(agent: Path, data: Path) -> tuple[subprocess.Popen[str], str]:
    script = Path(sys.executable).parent / "eve"
    eve = [str(script)] if script.exists() else [sys.executable, "-m", "eve_cli"]
    proc = subprocess.Popen(
        [*eve, "start", "--port", "0", "--agent", str(agent), "--data", str(data)],
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
    proc.stdout.close()
    raise RuntimeError(f"eve start did not announce its address: {line!r}")


async def _client(
    url: str,
    turns: int,
    rng: random.Random,
    ready: asyncio.Barrier,
    latencies: list[float],
) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        return await _session(http, turns, rng, ready, latencies)


async def _session(
    http: httpx.AsyncClient,
    turns: int,
    rng: random.Random,
    ready: asyncio.Barrier,
    latencies: list[float],
) -> int:
    try:
        created = await http.post(f"{PREFIX}/session", json={})
        created.raise_for_status()
    except BaseException:
        await ready.abort()  # the others must not wait for this one
        raise
    sid = created.json()["sessionId"]
    done = 0
    async with http.stream("GET", f"{PREFIX}/session/{sid}/stream?startIndex=0") as stream:
        lines = stream.aiter_lines()
        await ready.wait()  # every session exists and is followed: the turns start together
        for _ in range(turns):
            started = time.perf_counter()
            sent = await http.post(f"{PREFIX}/session/{sid}", json={"message": text(rng, 200)})
            sent.raise_for_status()
            async for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "turn.completed":
                    latencies.append(time.perf_counter() - started)
                    done += 1
                    break
                if event.get("type") in ("turn.failed", "session.failed"):
                    raise RuntimeError(f"session {sid}: {event}")
    return done


async def _level(url: str, clients: int, turns: int, seed: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    ready = asyncio.Barrier(clients + 1)
    runs = [
        asyncio.create_task(_client(url, turns, random.Random(seed * 1000 + i), ready, latencies))
        for i in range(clients)
    ]
    await ready.wait()
    started = time.perf_counter()
    counts = await asyncio.gather(*runs)
    elapsed = time.perf_counter() - started
    return sum(counts) / elapsed, latencies


def run(quick: bool) -> Iterator[dict[str, Any]]:
    levels = [(1, 3), (4, 2)] if quick else [(1, 100), (10, 20), (100, 3)]
    rng = random.Random(1)
    most = max(turns for _, turns in levels)
    script = [{"text": text(rng, REPLY_CHARS), "tool_calls": []} for _ in range(most)]
    with scratch("server") as root:
        agent = write_agent(root / "agent", script)
        proc, url = _serve(agent, root / "data")
        try:
            rates = []
            for i, (clients, turns) in enumerate(levels):
                rate, latencies = asyncio.run(_level(url, clients, turns, i))
                rates.append(rate)
                yield measurement(
                    f"server_throughput.steps_per_s.{clients}", rate, "steps/s", sessions=clients
                )
                yield measurement(
                    f"server_throughput.latency_p50.{clients}", median(latencies), "s",
                    sessions=clients,
                )  # fmt: skip
                yield measurement(
                    f"server_throughput.latency_p99.{clients}", percentile(latencies, 99), "s",
                    sessions=clients,
                )  # fmt: skip
            yield measurement(
                "server_throughput.scaling", rates[-1], "steps/s", baseline=rates[0],
                sessions=[clients for clients, _ in levels],
            )  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
