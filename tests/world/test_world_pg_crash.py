"""The PostgreSQL world across a crash of the database server (a throwaway cluster killed with
`pg_ctl stop -m immediate`): what an owner was told is written survives it, an owner goes on
after a restart that lost nothing, and never appends after a hole when the database kept less
than it wrote (a restart from an older state, or anything else behind its back)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.pg_cluster import Cluster, throwaway_cluster
from tests.pg_support import fresh_schema, with_params
from world import Engine, StorageError, WorkflowContext
from world._store import LAZY
from world.stores.postgres.world import PostgresWorld

RECORD_BODY = b"\x93\x01\x00\xc4\x00"


async def _steps(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.step(f"s{i}", lambda i=i: i)
    return total


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with throwaway_cluster() as found:
        yield found


def _sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


def _family(world: PostgresWorld) -> str:
    return asyncio.run(Engine(world, {"steps": _steps}).start("steps", 1))


def test_what_an_owner_wrote_survives_a_crash_of_the_server(cluster: Cluster) -> None:
    url = with_params(cluster.url, schema="survives")
    world = PostgresWorld(url)
    try:
        rid = _family(world)
        name = f"history.{rid}"
        with world.acquire(rid):
            for i in range(5):
                world.stream_append(name, i)  # not on a loop: written when it returns
            world.append(rid, [RECORD_BODY] * 3, LAZY)  # lazy: written with the next batch
            world.before_effect()
            journal = _sql(url, "SELECT count(*) FROM survives.records WHERE root = %s", rid)
            cluster.crash()  # within the WAL writer's delay: buffered WAL is lost
            cluster.start()
    finally:
        world.close()
    after = PostgresWorld(url)
    try:
        assert after.stream_read(name) == [0, 1, 2, 3, 4]
        assert _sql(url, "SELECT count(*) FROM survives.records WHERE root = %s", rid) == journal
        assert journal[0][0] == 4  # the family's first, and the 3 lazy ones
    finally:
        after.close()


def test_an_owner_goes_on_after_a_restart_that_lost_nothing(cluster: Cluster) -> None:
    url = with_params(cluster.url, schema="goes_on")
    world = PostgresWorld(url)
    try:
        rid = _family(world)
        name = f"history.{rid}"
        with world.acquire(rid):
            world.stream_append(name, "a")
            cluster.crash()
            cluster.start()
            assert world.stream_append(name, "b") == 1  # read again, found where it was
            world.append(rid, [RECORD_BODY])
            world.before_effect()
            assert world.stream_read(name) == ["a", "b"]
    finally:
        world.close()


def test_an_owner_stops_when_the_restarted_server_kept_less_than_it_wrote(
    cluster: Cluster,
) -> None:
    url = with_params(cluster.url, schema="kept_less")
    world = PostgresWorld(url)
    try:
        rid = _family(world)
        name = f"history.{rid}"
        with world.acquire(rid):
            for item in "abc":
                world.stream_append(name, item)
            cluster.crash()
            cluster.start()
            # As a server restored from an older state would: the last item is gone.
            _sql(url, "DELETE FROM kept_less.stream_items WHERE idx = 2 AND stream = "
                 "(SELECT id FROM kept_less.streams WHERE name = %s)", name)  # fmt: skip
            _sql(url, "UPDATE kept_less.streams SET length = 2 WHERE name = %s", name)
            with pytest.raises(StorageError, match=r"kept less than this worker wrote.*resume"):
                world.stream_append(name, "d")
        assert world.stream_read(name) == ["a", "b"]  # nothing after the hole
        with world.acquire(rid):  # a resume reads the lengths the database kept
            assert world.stream_append(name, "d") == 2
    finally:
        world.close()


def test_a_batch_after_a_hole_is_refused_by_the_database() -> None:
    with fresh_schema() as url:
        world = PostgresWorld(url)
        try:
            rid = _family(world)
            name = f"history.{rid}"
            schema = url.rsplit("schema=", 1)[1]
            with world.acquire(rid):
                for item in "abc":
                    world.stream_append(name, item)
                # Behind the owner's back, no restart to notice: the last item is gone.
                _sql(url, f'DELETE FROM "{schema}".stream_items WHERE idx = 2 AND stream = '
                     f'(SELECT id FROM "{schema}".streams WHERE name = %s)', name)  # fmt: skip
                _sql(url, f'UPDATE "{schema}".streams SET length = 2 WHERE name = %s', name)
                with pytest.raises(StorageError, match=r"does not end where.*resume"):
                    world.stream_append(name, "d")
            assert world.stream_read(name) == ["a", "b"]
        finally:
            world.close()


def test_the_pool_logs_a_server_away_in_one_line_a_record(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    url = with_params(cluster.url, schema="logs")
    world = PostgresWorld(url)
    try:
        world.families()
        cluster.crash()
        reader = threading.Thread(target=world.families)  # retried until the server is back
        reader.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            "error connecting" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)  # until the pool has failed to connect (checked below)
        cluster.start()
        reader.join(60)
    finally:
        world.close()
    pool = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    assert any("error connecting" in m for m in pool), pool
    assert all("\n" not in m for m in pool), pool
