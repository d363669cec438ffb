"""The PostgreSQL world: step overhead against its floor, and storage per turn.

Needs a server: `EVE_BENCH_POSTGRES` (default `postgresql://postgres@127.0.0.1:5432/postgres`);
each measurement works in a schema of its own, dropped afterwards.

* ``postgres.step``: seconds per step of the same agent loop as ``step_overhead`` (a model call
  asking for the no-op tool, then the tool: two durable actions), one session on a
  ``PostgresWorld``. ``baseline``, the floor: after each turn, the bytes that turn stored
  (journal records and stream items), inserted into a table of one ``bytea`` column in as
  many statements as the turn had durable actions, each its own transaction (autocommit,
  ``synchronous_commit`` on), over a connection with the same settings. Turns and floors
  alternate; medians. Target (issue 15): ratio ≤ 3.
* ``postgres.text``: the same steps with real payloads (``STEP_TEXT``: about 365 bytes of model
  text, and a tool returning as much), a second session in the same schema, turns alternated
  with the first; ``baseline`` the floor of its bytes. ``commits`` and ``wal_bytes``: commit
  records and WAL bytes per step (``pg_walinspect``), counted server-wide (a quiet server:
  nothing else writes meanwhile); every commit is synchronous (``synchronous_commit`` on).
  Issue 32's gates: ratio ≤ 3, ≤ 1.2 commits a step.
* ``postgres.sweep``: seconds a shared world's sweep (`Runtime.resumable`: the families with
  work no live worker holds) takes with ``PARKED`` sessions parked on their hooks; baseline:
  the same with 10 (SPEC: parked sessions cost nothing: ratio ~1). The parked families are
  one real parked session's rows copied under new roots.
* ``postgres.bytes_per_turn``: table + index bytes of a conversation of ``LARGE`` turns, per
  turn; ``postgres.growth``: bytes(``LARGE`` turns) / bytes(``SMALL`` turns) (linear: ≤ 11).
* ``postgres.late_turn``: a turn's drive in that conversation's last 2% of turns against one
  in its 2–4% (SPEC: a turn costs the same however old the session: ratio ~1); medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import STEP_TEXT, call, median, scratch, text, write_agent

CHUNK = 50
ACTIONS_PER_STEP = 2
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def server() -> str:
    return os.environ.get("EVE_BENCH_POSTGRES") or DEFAULT_URL


@contextlib.contextmanager
def schema() -> Iterator[tuple[str, str]]:
    """(world URL, schema name) of a fresh schema, dropped afterwards."""
    import psycopg

    name = f"bench_{secrets.token_hex(5)}"
    sep = "&" if "?" in server() else "?"
    try:
        yield f"{server()}{sep}schema={name}", name
    finally:
        with psycopg.connect(server(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _stored(conn: Any, name: str) -> int:
    """Bytes of the journal records and stream items stored in schema `name`."""
    row = conn.execute(
        f'SELECT (SELECT coalesce(sum(octet_length(body)), 0) FROM "{name}".records)'
        f' + (SELECT coalesce(sum(octet_length(item)), 0) FROM "{name}".stream_items)'
    ).fetchone()
    return int(row[0]) if row else 0


def _floor(conn: Any, name: str, sizes: list[int]) -> float:
    """Seconds for one INSERT + COMMIT per size, of that many bytes."""
    conn.execute(f'CREATE TABLE IF NOT EXISTS "{name}".floor (data bytea NOT NULL)')
    started = time.perf_counter()
    for size in sizes:
        conn.execute(f'INSERT INTO "{name}".floor (data) VALUES (%s)', [b"x" * size])
    took = time.perf_counter() - started
    conn.execute(f'TRUNCATE "{name}".floor')
    return took


def _lsn(conn: Any) -> str:
    row = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
    return str(row[0]) if row else "0/0"


def _wal(conn: Any, name: str, start: str) -> tuple[int, int]:
    """Commit records and WAL bytes written since `start` (`pg_walinspect`, installed in the
    bench's schema): server-wide, so on a quiet server."""
    row = conn.execute(
        f"SELECT count(*) FILTER (WHERE resource_manager = 'Transaction' "
        f"AND record_type LIKE 'COMMIT%%'), pg_wal_lsn_diff(pg_current_wal_flush_lsn(), "
        f'%s::pg_lsn) FROM "{name}".pg_get_wal_records_info(%s::pg_lsn, '
        "pg_current_wal_flush_lsn())",
        [start, start],
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


class _Series:
    def __init__(self) -> None:
        self.per_step: list[float] = []
        self.floors: list[float] = []
        self.commits: list[float] = []
        self.wal: list[float] = []


def _steps_script(rounds: int, chunk: int, tool: str, said: str) -> list[dict[str, Any]]:
    script: list[dict[str, Any]] = []
    for _ in range(rounds):
        script += [{"text": said, "tool_calls": [call(tool)]} for _ in range(chunk - 1)]
        script.append({"text": "done", "tool_calls": []})
    return script


def measure_steps(root: Path, steps: int) -> Iterator[dict[str, Any]]:
    import psycopg

    from eve_cli.runtime import Runtime

    chunk = min(CHUNK, steps)
    rounds = max(steps // chunk, 1)
    kinds = {"plain": ("noop", ""), "text": ("payload", STEP_TEXT)}
    series = {kind: _Series() for kind in kinds}
    with schema() as (url, name), psycopg.connect(server(), autocommit=True) as conn:
        runtimes = {
            kind: Runtime(
                data_dir=url,
                agent_dir=write_agent(root / kind, _steps_script(rounds, chunk, tool, said)),
            )
            for kind, (tool, said) in kinds.items()
        }

        async def turn(rt: Runtime, sid: str, out: _Series) -> None:
            await rt.deliver(sid, "go")
            before, lsn = _stored(conn, name), _lsn(conn)
            started = time.perf_counter()
            view = await rt.drive(sid)
            elapsed = time.perf_counter() - started
            if view["status"] != "waiting":
                raise RuntimeError(f"benchmark turn did not complete: {view['status']}")
            commits, wal = _wal(conn, name, lsn)
            size = max(_stored(conn, name) - before, 1)
            writes = chunk * ACTIONS_PER_STEP
            out.floors.append(_floor(conn, name, [size // writes] * writes) / chunk)
            out.per_step.append(elapsed / chunk)
            out.commits.append(commits / chunk)
            out.wal.append(wal / chunk)

        async def main() -> None:
            sids = {}
            for kind, rt in runtimes.items():
                sids[kind] = await rt.create_session()
                await rt.drive(sids[kind])
            conn.execute(f'CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA "{name}"')
            for _ in range(rounds):
                for kind, rt in runtimes.items():
                    await turn(rt, sids[kind], series[kind])

        try:
            asyncio.run(main())
        finally:
            for rt in runtimes.values():
                rt.close()
    plain, said = series["plain"], series["text"]
    yield measurement(
        "postgres.step", median(plain.per_step), "s/step", baseline=median(plain.floors),
        commits=median(plain.commits), wal_bytes=median(plain.wal), steps=steps,
    )  # fmt: skip
    yield measurement(
        "postgres.text", median(said.per_step), "s/step", baseline=median(said.floors),
        commits=median(said.commits), wal_bytes=median(said.wal), steps=steps,
    )  # fmt: skip


PARKED = 10_000


def measure_sweep(root: Path, parked: int) -> Iterator[dict[str, Any]]:
    import psycopg

    from eve_cli.runtime import Runtime

    agent = write_agent(root / "sweep", [{"text": "done", "tool_calls": []}])
    times: dict[int, float] = {}
    for count in (10, parked):
        with schema() as (url, name), psycopg.connect(server(), autocommit=True) as conn:
            rt = Runtime(data_dir=url, agent_dir=agent)
            try:
                sid = asyncio.run(rt.create_session())
                asyncio.run(rt.drive(sid))  # parked on its hook, waiting for a message
                s = f'"{name}"'
                conn.execute(
                    f"INSERT INTO {s}.families (root, next_pos, inbox_next, due, hook_mark) "
                    f"SELECT 'c' || i, next_pos, inbox_next, due, hook_mark FROM {s}.families, "
                    "generate_series(2, %s) i WHERE root = %s",
                    [count, sid],
                )
                conn.execute(
                    f"INSERT INTO {s}.heads (root, head) SELECT 'c' || i, head FROM {s}.heads, "
                    "generate_series(2, %s) i WHERE root = %s",
                    [count, sid],
                )
                conn.execute(f"ANALYZE {s}.families")
                rt.resumable()  # warm: connections, prepared statements
                runs = []
                for _ in range(20):
                    started = time.perf_counter()
                    found = rt.resumable()
                    runs.append(time.perf_counter() - started)
                if found:
                    raise RuntimeError(f"parked sessions were found resumable: {found[:3]}")
                times[count] = median(runs)
            finally:
                rt.close()
    yield measurement("postgres.sweep", times[parked], "s/sweep", baseline=times[10], parked=parked)


def _conversation_bytes(root: Path, turns: int, took: list[float] | None = None) -> int:
    """Table + index bytes of a world holding one conversation of `turns` turns (`took`: each
    turn's drive, in seconds, appended)."""
    import psycopg

    from eve_cli.runtime import Runtime

    rng = random.Random(1)
    script = [{"text": text(rng, 300), "tool_calls": []} for _ in range(turns)]
    agent = write_agent(root / f"agent{turns}", script, context_window=10_000_000)
    with schema() as (url, name):
        rt = Runtime(data_dir=url, agent_dir=agent)

        async def main() -> None:
            sid = await rt.create_session()
            for _ in range(turns):
                await rt.deliver(sid, text(rng, 200))
                started = time.perf_counter()
                await rt.drive(sid)
                if took is not None:
                    took.append(time.perf_counter() - started)

        try:
            asyncio.run(main())
        finally:
            rt.close()
        with psycopg.connect(server(), autocommit=True) as conn:
            conn.execute("CHECKPOINT")  # (sizes are of the relations, not of the WAL)
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'",
                [name],
            ).fetchone()
    return int(row[0]) if row else 0


def run(quick: bool) -> Iterator[dict[str, Any]]:
    with scratch("postgres") as root:
        yield from measure_steps(root, 20 if quick else 1000)
        yield from measure_sweep(root, 100 if quick else PARKED)
        small, large = (4, 16) if quick else (100, 1000)
        small_bytes = _conversation_bytes(root, small)
        took: list[float] = []
        large_bytes = _conversation_bytes(root, large, took)
        tail = max(len(took) // 50, 1)
        early, late = took[tail : 2 * tail], took[-tail:]
        yield measurement(
            "postgres.late_turn", median(late), "s/turn", baseline=median(early), turns=large
        )
        yield measurement("postgres.bytes_per_turn", large_bytes / large, "bytes/turn", turns=large)
        yield measurement(
            "postgres.growth", large_bytes, "bytes", baseline=small_bytes, turns=[small, large]
        )
