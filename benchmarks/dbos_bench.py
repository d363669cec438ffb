"""eve's durable step on PostgreSQL against DBOS Transact's, on the same server, in one run.

Optional: needs `dbos` (`pip install dbos`; a benchmark's dependency only, never eve's) and a
server, `EVE_BENCH_POSTGRES` (default the local one). Without `dbos` it says so and measures
nothing. Each side works in a schema of its own, dropped afterwards.

* ``dbos.step``: seconds per durable step of a workflow of ``CHUNK`` no-op steps on eve's
  `Engine` over a `PostgresWorld` (`ctx.step`); ``baseline``: the same workflow on DBOS
  (`@DBOS.workflow` calling a `@DBOS.step` ``CHUNK`` times), its system database in the same
  server. Rounds alternate; medians. Below 1: eve is ahead per step (issue 15).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import secrets
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from . import measurement
from ._support import median
from .postgres_bench import schema, server

CHUNK = 100


def _noop(i: int) -> int:
    return i


@contextlib.contextmanager
def _dbos(dbos: Any) -> Iterator[Any]:
    """A launched DBOS with the benchmark's workflow, its system tables in a fresh schema."""
    name = f"dbos_{secrets.token_hex(5)}"
    app = dbos.DBOS
    step = app.step()(_noop)

    def flow(n: int) -> int:
        return sum(step(i) for i in range(n))

    workflow = app.workflow()(flow)
    app(config={"name": "eve-bench", "system_database_url": server(),
                "dbos_system_schema": name, "log_level": "WARNING"})  # fmt: skip
    app.launch()
    try:
        yield workflow
    finally:
        app.destroy()
        with psycopg.connect(server(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def run(quick: bool) -> Iterator[dict[str, Any]]:
    try:
        dbos = importlib.import_module("dbos")
    except ImportError:
        print("# dbos: not installed (pip install dbos): nothing measured", file=sys.stderr)
        return
    from world import Engine, PostgresWorld, WorkflowContext

    async def steps(ctx: WorkflowContext, n: int) -> int:
        total = 0
        for i in range(n):
            total += await ctx.step(f"s{i}", _noop, i)
        return total

    rounds = 2 if quick else 10
    eve_times: list[float] = []
    dbos_times: list[float] = []
    with schema() as (url, _), _dbos(dbos) as workflow:
        world = PostgresWorld(url)
        engine = Engine(world, {"steps": steps})
        try:
            for _ in range(rounds):
                rid = asyncio.run(engine.start("steps", CHUNK))
                started = time.perf_counter()
                asyncio.run(engine.run(rid))
                eve_times.append((time.perf_counter() - started) / CHUNK)
                started = time.perf_counter()
                workflow(CHUNK)
                dbos_times.append((time.perf_counter() - started) / CHUNK)
        finally:
            world.close()
    yield measurement(
        "dbos.step", median(eve_times), "s/step", baseline=median(dbos_times),
        steps=CHUNK * rounds, dbos=importlib.metadata.version("dbos"),
    )  # fmt: skip
