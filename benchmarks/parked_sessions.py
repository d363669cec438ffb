"""Many sessions parked on approvals: what they hold, how fast they list, how fast one wakes.

A few real sessions are driven on the scripted model until their turn parks on an approval
(the agent calls the ``deploy`` tool, which always asks). The store is then filled to ``N``
parked sessions by cloning those sessions' files under fresh session ids and continuation
tokens (same-length ids, so every offset stays valid; each journal and stream frame is
re-checksummed); then each clone is opened once by an engine (lease, load, nothing to run), which
rewrites its head as a drive would. The clones are real sessions: `world.verify` finds nothing
wrong (tests/benchmarks/test_parked_clone.py), and the benchmark wakes one of them.

* ``parked_sessions.processes``: processes and threads alive besides the benchmark's own
  main thread after parking (SPEC §11 / D5: 0).
* ``parked_sessions.list``: seconds for ``Runtime.sessions()`` over ``N`` sessions in a fresh
  runtime (SPEC §11: ≤ 1 s).
* ``parked_sessions.inspect``: wall seconds of ``eve inspect --json`` over the store (a new
  process, startup included; ``cpu``: its user + system seconds), when the command exists
  (issue 8: ≤ 1 s for the whole process).
* ``parked_sessions.wake``: seconds from delivering an approval to one cloned parked session
  to its turn done (a fresh runtime in this process).
* ``parked_sessions.lineage``: seconds for ``Runtime.lineage`` of a session with one fork
  among the ``N`` (median of repeated calls in one runtime, as a server answers
  ``GET /session/{id}``; ``view``: that request's runtime work, the view and the lineage).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from . import measurement
from ._support import call, median, scratch, write_agent
from .cli_startup import wall

SEEDS = 4


def _script() -> list[dict[str, Any]]:
    return [
        {"text": "", "tool_calls": [call("deploy", target="prod")]},
        {"text": "deployed", "tool_calls": []},
    ]


async def _park_seeds(rt: Any, count: int) -> list[tuple[str, str]]:
    seeds = []
    for _ in range(count):
        sid = await rt.create_session()
        await rt.deliver(sid, "deploy it")
        view = await rt.drive(sid)
        if view["status"] != "parked" or view["parkedOn"] != "approval":
            raise RuntimeError(f"seed session did not park on an approval: {view['status']}")
        seeds.append((sid, rt.world.read_head(sid)["runs"][sid]["meta"]["token"]))
    return seeds


def _reframe(
    data: bytes, swaps: list[tuple[bytes, bytes]], crcs: dict[int, int] | None = None
) -> tuple[bytes, list[int], dict[int, int]]:
    """Swap ids inside every frame of a journal-format file; re-checksum. Returns the data,
    the frame offsets and the checksums it changed (old → new); `crcs` (from the inbox) is
    applied to the checksums journal `recv` records keep of their deliveries."""
    out, offsets, changed = bytearray(), [], {}
    for frame in _frames(data):
        version, crc, body = frame
        for old, new in swaps:
            body = body.replace(old, new)
        if crcs:
            rec = msgpack.unpackb(body, raw=False, strict_map_key=False)
            if rec.get("t") == "recv" and "c" in rec:  # plain msgpack: ints and strings only
                rec["c"] = [crcs.get(c, c) for c in rec["c"]]
                body = msgpack.packb(rec, use_bin_type=True)
        offsets.append(len(out))
        changed[crc] = zlib.crc32(body)
        out += msgpack.packb([version, changed[crc], body], use_bin_type=True)
    return bytes(out), offsets, changed


def _frames(data: bytes) -> Iterator[list[Any]]:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(data) + 1)
    unpacker.feed(data)
    yield from unpacker


def _clone(data_dir: Path, sid: str, token: str, cache: dict[Path, bytes]) -> str:
    """Copy session ``sid`` (parked) under a fresh id and token; no fsync (a benchmark store)."""
    new_sid = "s_" + secrets.token_hex(12)
    new_token = secrets.token_hex(16)
    # A token is stored as text, or (a hex token in the inbox and `gen` hooks) as its bytes:
    # msgpack bin 8 of 16 bytes.
    packed = (b"\xc4\x10" + bytes.fromhex(token), b"\xc4\x10" + bytes.fromhex(new_token))
    swaps = [(sid.encode(), new_sid.encode()), (token.encode(), new_token.encode()), packed]
    run_dir = data_dir / "runs" / sid
    new_dir = data_dir / "runs" / new_sid
    new_dir.mkdir()
    crcs: dict[int, int] = {}
    for name in ("inbox.msgpack", "journal.msgpack"):  # the inbox first: `recv` names its crcs
        if (run_dir / name).exists():
            data, _, changed = _reframe(_read(run_dir / name, cache), swaps, crcs)
            (new_dir / name).write_bytes(data)
            crcs = changed
    head = _read(run_dir / "head.msgpack", cache)
    for old, new in swaps:
        head = head.replace(old, new)
    (new_dir / "head.msgpack").write_bytes(head)
    if (run_dir / "streams.list").exists():  # the family's record of its streams
        record = _read(run_dir / "streams.list", cache).replace(sid.encode(), new_sid.encode())
        (new_dir / "streams.list").write_bytes(record)
    (data_dir / "hooks" / new_token).write_text(new_sid)
    streams = data_dir / "streams"
    for kind in ("events", "history"):
        path = streams / f"{kind}.{sid}.msgpack"
        if not path.exists():
            continue
        data, offsets, _ = _reframe(_read(path, cache), swaps)
        (streams / f"{kind}.{new_sid}.msgpack").write_bytes(data)
        index = b"".join(o.to_bytes(8, "little") for o in offsets[1:])  # not the header
        (streams / f"{kind}.{new_sid}.idx").write_bytes(index)
    return new_sid


def _read(path: Path, cache: dict[Path, bytes]) -> bytes:
    if path not in cache:
        cache[path] = path.read_bytes()
    return cache[path]


def build(root: Path, n: int) -> tuple[Path, Path, list[str]]:
    """Park ``n`` sessions under ``root``; returns the agent, the data directory and the ids of
    the cloned sessions."""
    from eve_cli.runtime import Runtime

    agent = write_agent(root / "agent", _script())
    data = root / "data"
    rt = Runtime(data_dir=data, agent_dir=agent)
    try:
        seeds = asyncio.run(_park_seeds(rt, min(SEEDS, n)))
    finally:
        rt.close()
    cache: dict[Path, bytes] = {}
    clones = []
    for i in range(n - len(seeds)):
        sid, token = seeds[i % len(seeds)]
        clones.append(_clone(data, sid, token, cache))
    # Open every clone once as an owner would (lease, load, nothing to run): the engine then
    # writes its head as after a real drive, with the listing note naming its own files.
    rt = Runtime(data_dir=data, agent_dir=agent)

    async def reopen() -> None:
        for sid in clones:
            info = await rt.engine.run(sid)
            if info.status != "parked":
                raise RuntimeError(f"clone {sid} is {info.status} after loading, not parked")

    try:
        asyncio.run(reopen())
    finally:
        rt.close()
    return agent, data, clones


def _others() -> tuple[int, int]:
    """(child processes of this process, threads besides the main one)."""
    me = os.getpid()
    children = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            children += 1
    threads = len(os.listdir(f"/proc/{me}/task")) - 1
    return children, max(threads, threading.active_count() - 1)


def _list_time(agent: Path, data: Path, n: int, rounds: int) -> float:
    from eve_cli.runtime import Runtime

    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        rt = Runtime(data_dir=data, agent_dir=agent)
        rows = rt.sessions()
        times.append(time.perf_counter() - started)
        rt.close()
        parked = sum(1 for r in rows if r["status"] == "parked")
        if parked != n:
            raise RuntimeError(f"listed {parked} parked sessions of {n}")
    return median(times)


def _inspect_time(agent: Path, data: Path, rounds: int) -> tuple[float, float] | None:
    """Median wall and CPU seconds of ``eve inspect --json``, run beside the agent folder."""
    env = {**os.environ, "EVE_DATA_DIR": str(data)}
    command = [sys.executable, "-m", "eve_cli", "inspect", "--json"]
    probe = subprocess.run([*command[:-1], "--help"], env=env, capture_output=True, check=False)
    if probe.returncode != 0:
        return None  # no `eve inspect` in this checkout
    return wall(command, env, agent.parent, rounds)


def _wake(agent: Path, data: Path, sid: str) -> float:
    from eve_cli.runtime import Runtime

    async def main() -> float:
        started = time.perf_counter()
        rt = Runtime(data_dir=data, agent_dir=agent)
        try:
            [request] = rt.session(sid)["pending"]
            await rt.respond(sid, [{"requestId": request["requestId"], "approved": True}])
            view = await rt.drive(sid)
        finally:
            rt.close()
        if view["status"] != "waiting":
            raise RuntimeError(f"woken session is {view['status']}, not waiting")
        return time.perf_counter() - started

    return asyncio.run(main())


def _lineage_time(agent: Path, data: Path, sid: str, rounds: int) -> tuple[float, float]:
    """Median seconds of ``lineage(sid)`` and of ``session(sid)`` with it, after forking
    ``sid`` once (a runtime kept open, as a server's)."""
    from eve_cli.runtime import Runtime

    rt = Runtime(data_dir=data, agent_dir=agent)
    try:
        fork = asyncio.run(rt.fork(sid))["sessionId"]
        alone, both = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            found = rt.lineage(sid)
            alone.append(time.perf_counter() - started)
            started = time.perf_counter()
            rt.session(sid)
            rt.lineage(sid)
            both.append(time.perf_counter() - started)
            if found["forks"] != [fork]:
                raise RuntimeError(f"lineage lists {found['forks']}, not the fork {fork}")
    finally:
        rt.close()
    return median(alone), median(both)


def run(quick: bool) -> Iterator[dict[str, Any]]:
    n = 20 if quick else 10_000
    with scratch("parked") as root:
        agent, data, clones = build(root, n)
        children, threads = _others()
        yield measurement("parked_sessions.processes", children + threads, "processes+threads",
                          sessions=n, children=children, threads=threads)  # fmt: skip
        yield measurement("parked_sessions.list", _list_time(agent, data, n, 3), "s", sessions=n)
        inspect = _inspect_time(agent, data, 3)
        if inspect is not None:
            seconds, cpu = inspect
            yield measurement(
                "parked_sessions.inspect", seconds, "s", sessions=n, cpu=round(cpu, 4)
            )
        yield measurement("parked_sessions.wake", _wake(agent, data, clones[-1]), "s", sessions=n)
        alone, view = _lineage_time(agent, data, clones[0], 5)
        yield measurement(
            "parked_sessions.lineage", alone, "s", sessions=n + 1, view=round(view, 6)
        )
