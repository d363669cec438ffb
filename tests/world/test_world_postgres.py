"""What only the PostgreSQL world has: its schema's versions, its connection budget, its
fencing, and how it meets an unreachable or restarting database. (Everything every world
does is the conformance suite's, which runs on it too.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.pg_support import (
    fresh_database,
    fresh_schema,
    require_server,
    to_version_11,
    to_version_12,
    with_params,
)
from world import (
    Engine,
    OwnershipError,
    StorageError,
    WorkflowContext,
    WorldError,
    _codec,
)
from world._commit import EFFECT_WAIT
from world.stores.local.layout import FORMS_VERSION
from world.stores.postgres.schema import STORE_FORMAT, VERSION
from world.stores.postgres.sql import _array, _ByteaArray, _configure, _int8_array, _TextArray
from world.stores.postgres.urls import redact_url as redact
from world.stores.postgres.world import PostgresWorld


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as found:
        yield found


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&")[0]


def _sql(query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(require_server(), autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


def _cut(tag: str, *, idle: bool = False) -> None:
    """End the server's connections named `tag` (`idle`: those waiting for a statement, the
    pool's and the listener's alike)."""
    idle_only = " AND state = 'idle'" if idle else ""
    _sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
        + idle_only,
        tag,
    )


def _stored_once(world: PostgresWorld, rid: str, steps: list[str]) -> None:
    """Family `rid`'s records are at positions 1, 2, ... with no gap, its steps `steps`, each
    once."""
    records = world.load(rid).records
    assert [pos for pos, _ in records] == list(range(1, len(records) + 1))
    assert [rec["name"] for _, rec in records if rec.get("t") == "step"] == steps


def test_import_world_does_not_load_the_driver() -> None:
    code = "import sys, world; print('psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_schema_newer_than_this_eve_is_refused_clearly(url: str) -> None:
    PostgresWorld(url).close()
    schema = _schema(url)
    _sql(f'INSERT INTO "{schema}".schema_version (version) VALUES (%s)', VERSION + 1)
    with pytest.raises(WorldError) as err:
        PostgresWorld(url)
    message = str(err.value)
    assert f"version {VERSION + 1}" in message and "newer eve" in message
    assert "upgrade eve" in message and "\n" not in message


def test_workers_starting_together_migrate_once(url: str) -> None:
    worlds: list[PostgresWorld] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            worlds.append(PostgresWorld(url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in worlds:
        w.close()
    assert errors == [] and len(worlds) == 4
    rows = _sql(f'SELECT version FROM "{_schema(url)}".schema_version ORDER BY version')
    assert rows == [(VERSION,)]


def test_a_schema_of_version_10_is_given_its_members_table_keeping_its_rows(url: str) -> None:
    world = PostgresWorld(url)
    world.create_family("r1", [_codec.encode({"t": "start", "at": 1.0, "workflow": "w"})])
    world.close()
    schema = _schema(url)
    with psycopg.connect(require_server(), autocommit=True) as conn:
        to_version_11(conn, schema)
    _sql(f'DROP TABLE "{schema}".members')  # as version 10 had it
    _sql(f'DELETE FROM "{schema}".schema_version WHERE version = 11')
    _sql(f'INSERT INTO "{schema}".schema_version (version) VALUES (10)')
    world = PostgresWorld(url)
    try:
        assert _sql(f'SELECT root, pos FROM "{schema}".records') == [("r1", 1)]
        world.advertise("w1", {"k": 1})
        assert [m.id for m in world.members(60)] == ["w1"]
    finally:
        world.close()
    rows = _sql(f'SELECT version FROM "{schema}".schema_version ORDER BY version')
    assert rows == [(10,), (VERSION,)] and VERSION == 13


def _counted_from_rows(url: str, root: str, names: list[str]) -> int:
    """A family's usage as its rows say (what `usage` summed before version 13)."""
    s = f'"{_schema(url)}"'
    [(n,)] = _sql(
        f"SELECT (SELECT coalesce(sum(octet_length(body)), 0) FROM {s}.records WHERE root = %s)"
        f" + (SELECT coalesce(sum(octet_length(body)), 0) FROM {s}.inbox WHERE root = %s)"
        f" + (SELECT coalesce(sum(octet_length(head)), 0) FROM {s}.heads WHERE root = %s)"
        f" + (SELECT coalesce(sum(octet_length(i.item)), 0) FROM {s}.stream_items i JOIN "
        f"{s}.streams st ON st.id = i.stream WHERE st.name = ANY(%s))",
        root,
        root,
        root,
        names,
    )
    return int(n)


def test_a_familys_usage_is_counted_where_its_rows_are_written(url: str) -> None:
    """A family's records and its streams' items are counted in bytes as they are written
    (an owner's batches, an append without the lease, a fork's copies, a rewrite, a repair),
    so its usage reads no rows of them, and says what the rows do."""
    world, other = PostgresWorld(url), PostgresWorld(url)
    try:
        engine = Engine(world, {"steps": _steps})
        rid = asyncio.run(engine.start("steps", 3))
        other.stream_append(f"events.{rid}", {"before": "x" * 100})  # no lease: a row of its own
        asyncio.run(engine.run(rid))
        lease = world.acquire(rid)

        async def batch() -> None:
            for i in range(5):
                world.stream_append(f"events.{rid}", {"i": i, "text": "y" * 300})
                world.stream_append(f"history.{rid}", {"m": "z" * i})
            world.append(rid, [_codec.encode({"t": "mark", "run": rid, "x": "w" * 50})])
            world.before_effect()

        asyncio.run(batch())
        lease.release()
        names = [f"events.{rid}", f"history.{rid}"]
        assert world.family_usage(rid, streams=names).bytes == _counted_from_rows(url, rid, names)
        plan = asyncio.run(engine.fork(rid, streams={f"events.{rid}": 3}))
        forked = [f"events.{plan.root}", f"history.{plan.root}"]
        assert world.family_usage(plan.root, streams=forked).bytes == _counted_from_rows(
            url, plan.root, forked
        )
        s = f'"{_schema(url)}"'
        _sql(f"UPDATE {s}.stream_items SET item = item || '\\x0000'::bytea WHERE idx = 1 "
             f"AND stream = (SELECT id FROM {s}.streams WHERE name = %s)", names[0])  # fmt: skip
        _sql(f"UPDATE {s}.records SET body = '\\xc1' WHERE root = %s AND pos = 2", rid)
        world.verify(repair=True)  # the damaged record: a gap, the original in quarantine
        usage = world.family_usage(rid, streams=names).bytes
        assert usage == _counted_from_rows(url, rid, names) > 0
        assert not [f for f in world.verify() if f.kind == "usage"]
        _sql(f"UPDATE {s}.families SET bytes = 1 WHERE root = %s", rid)  # (miscounted)
        _sql(f"UPDATE {s}.streams SET bytes = bytes + 5 WHERE name = %s", names[1])
        [stale] = [f for f in world.verify() if f.kind == "usage"]
        assert (stale.path, stale.state, stale.family) == (f"{rid}/usage", "stale", rid)
        assert f"stream {names[1]}" in stale.detail
        [done] = [f for f in world.verify(repair=True) if f.kind == "usage"]
        assert done.state == "repaired" and not [f for f in world.verify() if f.kind == "usage"]
        assert world.family_usage(rid, streams=names).bytes == usage
    finally:
        world.close()
        other.close()


def test_a_schema_of_version_12_has_its_rows_counted_in_bytes(url: str) -> None:
    world = PostgresWorld(url)
    rid = asyncio.run(Engine(world, {"steps": _steps}).start("steps", 1))
    asyncio.run(Engine(world, {"steps": _steps}).run(rid))
    for i in range(20):
        world.stream_append(f"events.{rid}", {"i": i, "text": "t" * i})
    names = [f"events.{rid}"]
    counted = _counted_from_rows(url, rid, names)
    world.close()
    with psycopg.connect(require_server(), autocommit=True) as conn:
        to_version_12(conn, _schema(url))
    world = PostgresWorld(url)
    try:
        assert world.family_usage(rid, streams=names).bytes == counted
        assert world.family_usage("r_none", streams=[]).bytes == 0
    finally:
        world.close()
    rows = _sql(f'SELECT version FROM "{_schema(url)}".schema_version ORDER BY version')
    assert rows[-2:] == [(12,), (VERSION,)]


def test_a_head_rewritten_many_times_keeps_its_table_a_few_pages() -> None:
    """A head rewritten at every drive's end, of a size that left a page whose free space
    was too small for the next version and too large to be pruned (a new page every six
    versions without the heads' fill factor: 50 pages, every run), stays in far fewer (a
    page is pruned only if no one else has it pinned at that moment: a checkpoint or the
    background writer writing it out makes a version skip it, more often on a loaded
    machine). A database of its own: another test's open transaction
    would keep every version."""
    import secrets

    with fresh_database() as url:
        world = PostgresWorld(url)
        try:
            world.create_family("r1", [_codec.encode({"t": "start", "at": 1.0, "workflow": "w"})])
            for _ in range(300):  # (random bytes: not compressed, as a head up to 2 kB is not)
                world.write_head("r1", {"v": 1, "runs": {}, "pad": secrets.token_bytes(1150)})
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute("SELECT pg_relation_size('eve.heads') / 8192").fetchone()
            assert row is not None and row[0] <= 25  # (half of 50; seen: 1-9, over 15 under load)
        finally:
            world.close()


def test_members_advertise_and_are_listed_while_heard_of(url: str) -> None:
    """`world.Presence`: a member's facts as it last said them, the live ones only."""
    from world import Presence

    world, other = PostgresWorld(url), PostgresWorld(url)
    try:
        assert isinstance(world, Presence)
        world.advertise("a", {"pid": 1, "name": "x"})
        other.advertise("b", {"pid": 2})
        world.advertise("a", {"pid": 3})  # said again: its facts replaced, its time renewed
        found = {m.id: m for m in other.members(60)}
        assert {k: dict(m.facts) for k, m in found.items()} == {"a": {"pid": 3}, "b": {"pid": 2}}
        assert all(0 <= m.seen_ago < 5 for m in found.values())
        _sql(f"""UPDATE "{_schema(url)}".members SET seen = now() - interval '1 minute'
                 WHERE id = 'b'""")
        assert [m.id for m in world.members(30)] == ["a"]  # not heard of for 60 s > 30 s
        world.withdraw("a")
        assert world.members(30) == []
        _sql(f"""UPDATE "{_schema(url)}".members SET seen = now() - interval '2 days'""")
        world.advertise("c", {})  # a member unheard of for a day is removed
        assert [r[0] for r in _sql(f'SELECT id FROM "{_schema(url)}".members')] == ["c"]
    finally:
        world.close()
        other.close()


def test_a_reader_creates_nothing_and_sees_an_empty_world() -> None:
    with fresh_schema() as url:
        reader = PostgresWorld(url, create=False)
        assert reader.families() == [] and reader.read_head("nothing") is None
        assert _sql("SELECT 1 FROM pg_namespace WHERE nspname = %s", _schema(url)) == []
        reader.close()


def test_an_unreachable_database_is_one_line_naming_the_host_never_the_password() -> None:
    with pytest.raises(StorageError) as err:
        PostgresWorld("postgresql://eve:hunter2@127.0.0.1:9/eve?schema=x")
    message = str(err.value)
    assert "127.0.0.1:9/eve" in message and "server is running" in message
    assert "hunter2" not in message and "\n" not in message


def test_the_password_is_never_shown(url: str) -> None:
    secret = url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
    assert redact(secret).count("hunter2") == 0 and "***" in redact(secret)
    world = PostgresWorld(secret)  # trust auth: the password is not even asked for
    try:
        assert "hunter2" not in repr(world) + world.where + world.url
    finally:
        world.close()


async def _steps(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.step(f"s{i}", lambda i=i: i)
    return total


def test_connections_stay_within_the_pool_however_many_families_are_driven(url: str) -> None:
    tag = f"eve-budget-{_schema(url)}"
    world = PostgresWorld(with_params(url, pool="2", application_name=tag))
    engine = Engine(world, {"steps": _steps})
    seen: list[int] = []

    async def main() -> list[int]:
        ids = [await engine.start("steps", 5) for _ in range(12)]

        async def count() -> None:
            while len(seen) < 50:
                query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                rows = _sql(query, tag)
                seen.append(rows[0][0])
                await asyncio.sleep(0.005)

        counter = asyncio.create_task(count())
        infos = await asyncio.gather(*(engine.run(i) for i in ids))
        counter.cancel()
        return [info.result for info in infos]

    try:
        assert asyncio.run(main()) == [10] * 12
    finally:
        world.close()
    assert max(seen) <= 3  # the pool's two and the listener's one


def test_a_worker_that_lost_its_lease_can_write_nothing(url: str) -> None:
    first, second = PostgresWorld(url), PostgresWorld(url)
    try:
        engine = Engine(first, {"steps": _steps})
        rid = asyncio.run(engine.start("steps", 1))
        stale = first.acquire(rid)
        journal = len(first.load(rid).records)
        with pytest.raises(OwnershipError):
            second.acquire(rid)  # alive and within its lease: refused
        assert first._listener is not None
        first._listener.halt(first._wake_listener)  # its liveness lock goes: seen as dead
        taken = second.acquire(rid, wait=5)
        first.append(rid, [b"\x93\x01\x00\xc4\x00"])  # given its position: written later
        for write in (
            first.before_effect,  # refused: nothing follows it
            lambda: first.write_head(rid, {"runs": {}}),
            lambda: first.stream_append(f"events.{rid}", {"late": True}),
        ):
            with pytest.raises(OwnershipError, match="taken over"):
                write()
        assert len(second.load(rid).records) == journal
        assert second.stream_length(f"events.{rid}") == 0
        stale.release()  # a no-op: it is not its lease any more
        with pytest.raises(OwnershipError):
            PostgresWorld(url).acquire(rid)
        taken.release()
    finally:
        first.close()
        second.close()


def _halt_listener(world: PostgresWorld) -> None:
    """The world's liveness lock goes, as when its process freezes past its lease."""
    assert world._listener is not None
    world._listener.halt(world._wake_listener)


RECORD_BODY = b"\x93\x01\x00\xc4\x00"


def test_a_fenced_worker_never_stores_a_stream_item_again(url: str) -> None:
    first, second = PostgresWorld(url), PostgresWorld(url)
    try:
        rid = asyncio.run(Engine(first, {"steps": _steps}).start("steps", 1))
        name = f"events.{rid}"
        stale = first.acquire(rid)

        async def batched() -> None:  # on the loop an item waits for a commit, EFFECT_WAIT
            assert first.stream_append(name, {"n": 0}) == 0
            await asyncio.sleep(EFFECT_WAIT * 50)

        asyncio.run(batched())
        assert second.stream_read(name) == [{"n": 0}]  # written without a record after it
        _halt_listener(first)
        taken = second.acquire(rid, wait=5)

        async def late() -> None:
            # Given an index (the worker cannot know yet), but its batch is refused ...
            assert first.stream_append(name, {"late": 1}) == 1
            await asyncio.sleep(EFFECT_WAIT * 50)
            with pytest.raises(OwnershipError, match="taken over"):  # ... and so is the rest
                first.append(rid, [RECORD_BODY])
            with pytest.raises(OwnershipError, match="taken over"):
                first.stream_append(name, {"late": 2})

        asyncio.run(late())
        stale.release()  # no lease object left: the world still knows it lost the family
        with pytest.raises(OwnershipError, match="taken over"):
            first.stream_append(name, {"late": 3})
        with pytest.raises(OwnershipError, match="taken over"):
            first.write_head(rid, {"runs": {}})
        assert second.stream_read(name) == [{"n": 0}]
        assert second.stream_append(name, {"mine": 1}) == 1
        taken.release()
        with first.acquire(rid):  # acquired again: it may write again
            assert first.stream_append(name, {"again": 1}) == 2
        assert second.stream_read(name) == [{"n": 0}, {"mine": 1}, {"again": 1}]
    finally:
        first.close()
        second.close()


def test_a_step_s_stream_items_are_written_with_its_record(url: str) -> None:
    world, reader = PostgresWorld(url), PostgresWorld(url)
    seen: list[int] = []

    async def flow(ctx: WorkflowContext, _: None) -> list[int]:
        name = f"events.{ctx.run_id}"

        def emit() -> list[int]:
            return [world.stream_append(name, {"i": i}) for i in range(5)]

        def check_then_emit() -> list[int]:
            seen.append(reader.stream_length(name))  # the record is durable: so are its items
            return emit()

        first = await ctx.step("emit", emit)
        second = await ctx.step("emit2", check_then_emit)
        return first + second

    try:
        engine = Engine(world, {"flow": flow})
        rid = asyncio.run(engine.start("flow"))
        assert asyncio.run(engine.run(rid)).result == list(range(10))
        assert seen == [5]
        assert reader.stream_read(f"events.{rid}") == [{"i": i % 5} for i in range(10)]
        rows = _sql(
            f'SELECT idx FROM "{_schema(url)}".stream_items WHERE stream = '
            f'(SELECT id FROM "{_schema(url)}".streams WHERE name = %s) ORDER BY idx',
            f"events.{rid}",
        )
        assert [r[0] for r in rows] == list(range(10))
    finally:
        world.close()
        reader.close()


def test_a_batch_s_arrays_reach_the_server_as_they_were() -> None:
    # A batch's arrays are sent in binary form, built here, not by the driver.
    blobs = [b"", b'\x00\\{}",', bytes(range(256)) * 300]
    names = ["events.r1", "h\u00e9llo", ""]
    numbers = [0, -1, 2**62, 7]
    with psycopg.connect(require_server(), autocommit=True) as conn:
        _configure(conn)
        for values in (blobs, [blobs[1]], []):
            row = conn.execute("SELECT %b::bytea[]", [_array(_ByteaArray, values)]).fetchone()
            assert row is not None and row[0] == values
        row = conn.execute(
            "SELECT %b::text[], %b::bigint[], %b::bigint[]",
            [_array(_TextArray, [n.encode() for n in names]), _int8_array(numbers),
             _int8_array([])],
        ).fetchone()  # fmt: skip
        assert row == (names, numbers, [])


def test_a_batch_notifies_only_while_another_world_object_tails_its_family(url: str) -> None:
    owner, other = PostgresWorld(url), PostgresWorld(url)
    heard = psycopg.connect(require_server(), autocommit=True)
    heard.execute(f'LISTEN "eve_{_schema(url)}"')

    def notes() -> list[str]:
        heard.execute("SELECT 1")  # (notifications that came arrive with an answer)
        return [n.payload for n in heard.notifies(timeout=0.2)]

    rid = asyncio.run(Engine(owner, {"steps": _steps}).start("steps", 1))
    name = f"events.{rid}"

    async def batch(item: str) -> None:
        owner.stream_append(name, item)  # (kept for the next batch, on a loop)
        owner.before_effect()

    async def tail(world: PostgresWorld, want: int, got: list[tuple[float, Any]]) -> None:
        async for _, item in world.stream_tail(name):
            got.append((time.monotonic(), item))
            if len(got) == want:
                return

    def tailing(world: PostgresWorld, want: int) -> tuple[threading.Thread, list[Any]]:
        got: list[tuple[float, Any]] = []
        thread = threading.Thread(target=asyncio.run, args=(tail(world, want, got),))
        thread.start()
        deadline = time.monotonic() + 5
        while world._tails.get(rid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return thread, got

    try:
        with owner.acquire(rid):
            notes()
            asyncio.run(batch("alone"))
            assert notes() == []  # no one else tails it: nothing sent
            own, own_got = tailing(owner, 2)  # this object's tail is woken without one
            own_sent = time.monotonic()
            asyncio.run(batch("own"))
            theirs, their_got = tailing(other, 3)
            rows = _sql(f'SELECT key FROM "{_schema(url)}".tails WHERE root = %s', rid)
            assert rows == [(other._alive_key,)]
            sent = time.monotonic()
            asyncio.run(batch("seen"))
            own.join(5)
            theirs.join(5)
            assert [item for _, item in their_got] == ["alone", "own", "seen"]
            assert [item for _, item in own_got] == ["alone", "own"]
            assert their_got[-1][0] - sent < 1.0  # woken, not found by a later look
            assert own_got[-1][0] - own_sent < 1.0
            assert f"s{name}" in notes()
            deadline = time.monotonic() + 5  # the tail ended: its row goes
            while _sql(f'SELECT 1 FROM "{_schema(url)}".tails') and time.monotonic() < deadline:
                time.sleep(0.01)
            asyncio.run(batch("later"))
            assert notes() == []
    finally:
        heard.close()
        owner.close()
        other.close()


def test_the_tails_of_objects_no_longer_alive_are_forgotten(url: str) -> None:
    owner, other = PostgresWorld(url), PostgresWorld(url)
    rid = asyncio.run(Engine(owner, {"steps": _steps}).start("steps", 1))
    s = f'"{_schema(url)}"'
    _sql(f"INSERT INTO {s}.tails (root, key) VALUES (%s, 12345)", rid)  # a process that died

    async def first() -> None:
        async for _ in other.stream_tail(f"events.{rid}"):
            return

    try:
        owner.stream_append(f"events.{rid}", "a")
        asyncio.run(first())
        keys = _sql(f"SELECT key FROM {s}.tails WHERE root = %s", rid)
        assert keys in ([(other._alive_key,)], [])  # (the ended tail's row may be gone too)
        assert (12345,) not in keys
        deadline = time.monotonic() + 5  # (the ended tail's row goes off the loop)
        while _sql(f"SELECT 1 FROM {s}.tails") and time.monotonic() < deadline:
            time.sleep(0.01)
        other._tail_on(rid)  # a tail still open when its world closes
        assert _sql(f"SELECT key FROM {s}.tails") == [(other._alive_key,)]
        other.close()
        assert _sql(f"SELECT key FROM {s}.tails") == []
    finally:
        owner.close()
        other.close()


def test_a_listener_back_registers_its_tails_again(url: str) -> None:
    world = PostgresWorld(url)
    s = f'"{_schema(url)}"'
    rid = asyncio.run(Engine(world, {"steps": _steps}).start("steps", 1))
    try:
        world._listening()
        world._tail_on(rid)  # a tail open here
        assert _sql(f"SELECT key FROM {s}.tails") == [(world._alive_key,)]
        _sql(f"DELETE FROM {s}.tails")  # (taken as a dead object's while it was away)
        listener = world._listener
        assert listener is not None and listener._conn is not None
        _sql("SELECT pg_terminate_backend(%s)", listener._conn.info.backend_pid)
        deadline = time.monotonic() + 10
        while not _sql(f"SELECT 1 FROM {s}.tails") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _sql(f"SELECT key FROM {s}.tails") == [(world._alive_key,)]
    finally:
        world.close()


def test_a_stream_digest_reads_only_what_came_since_the_last_one(url: str) -> None:
    # (in one statement: the stream's row and those items)
    world, other = PostgresWorld(url), PostgresWorld(url)
    name, read = "events.r1", list[Any]()
    fetch, one = world._all, world._one

    def counted(what: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows = fetch(what, params)
        if what in ("stream_read", "stream_digest"):
            read.append(sum(1 for r in rows if r[-2] is not None))
        return rows

    def counted_one(what: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        read.append(what)  # (none: a digest is one statement)
        return one(what, params)

    world._all = counted  # type: ignore[method-assign, assignment]
    world._one = counted_one  # type: ignore[method-assign, assignment]
    s = f'"{_schema(url)}"'
    try:
        for i in range(300):
            other.stream_append(name, {"i": i})
        first = world.stream_digest(name, 300)
        for i in range(300, 310):
            other.stream_append(name, {"i": i})
        read.clear()
        assert world.stream_digest(name, 300) == first
        assert other.stream_digest(name, 310) == world.stream_digest(name, 310)
        assert read == [0, 10]  # (the 300 were known)
        _sql(f"UPDATE {s}.stream_items SET item = item || '\\x00'::bytea WHERE idx = 3 "
             f"AND stream = (SELECT id FROM {s}.streams WHERE name = %s)", name)  # fmt: skip
        changed = world.stream_digest(name, 300)
        assert changed != first and changed == other.stream_digest(name, 300)
        _sql(f"DELETE FROM {s}.stream_items WHERE stream = "
             f"(SELECT id FROM {s}.streams WHERE name = %s)", name)  # fmt: skip
        _sql(f"DELETE FROM {s}.streams WHERE name = %s", name)
        for i in range(300):  # removed and made again: another stream
            other.stream_append(name, {"i": -i})
        assert world.stream_digest(name, 300) == other.stream_digest(name, 300) != first
    finally:
        world.close()
        other.close()


def test_a_digest_of_a_shorter_prefix_asked_again_reads_nothing(url: str) -> None:
    # (a view checks its checkpoint's prefix at every drive, while the drives' ends move on)
    world, other = PostgresWorld(url), PostgresWorld(url)
    name, read = "events.r1", list[int]()
    fetch = world._all

    def counted(what: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows = fetch(what, params)
        if what in ("stream_read", "stream_digest"):
            read.append(sum(1 for r in rows if r[-2] is not None))
        return rows

    world._all = counted  # type: ignore[method-assign, assignment]
    s = f'"{_schema(url)}"'
    try:
        for i in range(40):
            other.stream_append(name, {"i": i})
        short = world.stream_digest(name, 20)
        for end in (30, 40):
            world.stream_digest(name, end)
            read.clear()
            assert world.stream_digest(name, 20) == short and read == [0]
        assert world.stream_digest(name, 25) == other.stream_digest(name, 25) and read == [0, 5]
        _sql(f"UPDATE {s}.stream_items SET item = item || '\\x00'::bytea WHERE idx = 3 "
             f"AND stream = (SELECT id FROM {s}.streams WHERE name = %s)", name)  # fmt: skip
        changed = world.stream_digest(name, 20)
        assert changed != short and changed == other.stream_digest(name, 20)
    finally:
        world.close()
        other.close()


def test_an_append_without_the_lease_is_refused_while_a_live_owner_holds_it(url: str) -> None:
    """An owner gives out its streams' indexes from the lengths it read when it took the
    lease: an append made around it would collide with the owner's next batch, so the
    database refuses it (and a takeover waits for one in flight, reading it)."""
    owner, other = PostgresWorld(url), PostgresWorld(url)
    try:
        rid = asyncio.run(Engine(owner, {"steps": _steps}).start("steps", 1))
        name = f"history.{rid}"
        assert other.stream_append(name, "a") == 0  # no owner: the database gives the index
        lease = owner.acquire(rid)
        assert owner.stream_append(name, "b") == 1  # written at once (no loop)
        with pytest.raises(OwnershipError, match="owned by another worker"):
            other.stream_append(name, "x")

        async def append() -> None:
            owner.stream_append(name, "c")
            owner.append(rid, [RECORD_BODY])
            owner.before_effect()  # the owner's batch goes through: nothing collided

        asyncio.run(append())
        assert other.stream_read(name) == ["a", "b", "c"]
        lease.release()
        assert other.stream_append(name, "d") == 3  # parked: anyone may append again
        with owner.acquire(rid):  # a resume reloads the lengths
            assert owner.stream_append(name, "e") == 4
    finally:
        owner.close()
        other.close()


async def _waits(ctx: WorkflowContext, kind: str) -> Any:
    if kind in ("hook", "heard"):
        return await ctx.create_hook().receive()
    await ctx.sleep(3600 if kind == "later" else 0.5)
    return "woke"


def _swept(world: PostgresWorld) -> set[str]:
    return {f.root for f in world.heads(runnable=True)}


def test_the_sweep_reads_only_the_families_with_work(url: str) -> None:
    world, other = PostgresWorld(url), PostgresWorld(url)
    engine = Engine(world, {"waits": _waits})
    try:
        rid = {k: asyncio.run(engine.start("waits", k)) for k in ("hook", "heard", "later", "due")}
        for r in rid.values():
            asyncio.run(engine.run(r))
        fresh = asyncio.run(engine.start("waits", "hook"))  # never driven: it has work
        due_head = world.read_head(rid["due"])
        assert due_head is not None
        due_at = due_head["runs"][rid["due"]]["waiting"]["timer"]
        swept, now = _swept(world), time.time()
        # Parked on a hook, on timers: nothing to do yet (the short timer: unless it is due).
        assert swept == ({fresh} if now < due_at else {fresh, rid["due"]})
        time.sleep(max(due_at - time.time(), 0) + 0.05)
        assert _swept(world) == {fresh, rid["due"]}  # its timer is due
        head = world.read_head(rid["heard"])
        assert head is not None
        token = head["runs"][rid["heard"]]["waiting"]["hook"]
        other.deliver(rid["heard"], token, "hi")  # from another process
        assert _swept(world) == {fresh, rid["due"], rid["heard"]}
        with other.acquire(fresh):  # a live owner drives it: not the sweep's
            assert _swept(world) == {rid["due"], rid["heard"]}
        assert set(engine.runnable()) == {fresh, rid["due"], rid["heard"]}
        asyncio.run(engine.run(rid["heard"]))  # taken: parked again, nothing new
        assert rid["heard"] not in _swept(world)
    finally:
        world.close()
        other.close()


def test_a_run_goes_on_when_its_connections_are_cut_between_steps(url: str) -> None:
    tag = f"eve-cut-{_schema(url)}"
    world = PostgresWorld(with_params(url, application_name=tag))
    ran: list[int] = []

    async def flow(ctx: WorkflowContext, _: None) -> list[int]:
        for i in range(4):
            await ctx.step(f"s{i}", ran.append, i)
            await ctx.step(f"cut{i}", _cut, tag)
        return ran

    engine = Engine(world, {"flow": flow})
    try:
        rid = asyncio.run(engine.start("flow"))
        assert asyncio.run(engine.run(rid)).result == [0, 1, 2, 3]
        assert ran == [0, 1, 2, 3]  # every step once: nothing re-run, nothing lost
    finally:
        world.close()


def test_an_inline_commit_whose_connection_broke_is_made_again_on_a_thread(url: str) -> None:
    """A commit made inline on the loop (`_offload.Placement`) that finds its connection cut
    does not retry there: its batch goes back to the lease and the commit is made again on a
    thread, which looks first whether the try committed. Every step runs once and every
    record is stored once, in order."""
    from world._offload import QUICK_AFTER

    tag = f"eve-inline-{_schema(url)}"
    world, other = PostgresWorld(with_params(url, application_name=tag)), PostgresWorld(url)
    sent = _threads_of(world, "_send_batch")
    ran: list[int] = []

    async def flow(ctx: WorkflowContext, _: None) -> list[int]:
        for i in range(4):
            await ctx.step(f"s{i}", ran.append, i)
            engine._placement._quick = QUICK_AFTER  # the next commit is made inline
            _cut(tag, idle=True)
        return ran

    engine = Engine(world, {"flow": flow})
    try:
        rid = asyncio.run(engine.start("flow"))
        sent.clear()
        assert asyncio.run(engine.run(rid)).result == [0, 1, 2, 3]
        assert ran == [0, 1, 2, 3]
        moved = [i for i, name in enumerate(sent[:-1]) if name == "MainThread"]
        assert moved and all(sent[i + 1] != "MainThread" for i in moved)  # made again
        _stored_once(other, rid, ["s0", "s1", "s2", "s3"])
    finally:
        world.close()
        other.close()


def test_an_inline_commit_whose_answer_was_lost_is_not_written_twice(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit made inline that committed but lost its answer (the connection failed after
    the COMMIT) is made again on a thread, which finds it stored and writes nothing more."""
    from world._offload import QUICK_AFTER

    world, other = PostgresWorld(url), PostgresWorld(url)
    real = psycopg.Connection.execute
    lost: list[str] = []

    def execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        cursor = real(self, query, *args, **kwargs)
        on_loop = threading.current_thread() is threading.main_thread()
        if on_loop and not lost and "commit_family" in str(query):
            lost.append(threading.current_thread().name)
            raise psycopg.OperationalError("the answer was lost")  # after the commit
        return cursor

    async def flow(ctx: WorkflowContext, _: None) -> int:
        total = 0
        for i in range(4):
            total += await ctx.step(f"s{i}", lambda i=i: i)
            engine._placement._quick = QUICK_AFTER  # the next commit is made inline
        return total

    engine = Engine(world, {"flow": flow})
    try:
        rid = asyncio.run(engine.start("flow"))
        monkeypatch.setattr(psycopg.Connection, "execute", execute)
        assert asyncio.run(engine.run(rid)).result == 6
        monkeypatch.undo()
        assert lost == ["MainThread"]
        _stored_once(other, rid, ["s0", "s1", "s2", "s3"])
    finally:
        world.close()
        other.close()


def test_an_inline_commit_never_waits_for_another_commit_of_its_family(url: str) -> None:
    """Made inline on the loop, a family's commit finds another one of it in flight (a timer's
    on a thread, maybe retrying a lost connection) and raises `WouldWait` instead of waiting
    for it, its batch left in the lease; made again off the loop, it is written whole."""
    from world import _offload
    from world._offload import WouldWait

    owner, other = PostgresWorld(url), PostgresWorld(url)
    try:
        rid = asyncio.run(Engine(owner, {"steps": _steps}).start("steps", 1))
        lease = owner.acquire(rid)
        committing = lease.committing  # type: ignore[attr-defined]

        async def commit() -> None:
            owner.append(rid, [RECORD_BODY])  # (on a loop: kept in the lease for a commit)
            owner.stream_append(f"history.{rid}", "kept")
            committing.acquire()  # another commit of the family is in flight
            token = _offload._INLINE.set(True)
            try:
                with pytest.raises(WouldWait):
                    owner.before_effect()
            finally:
                _offload._INLINE.reset(token)
                committing.release()
            assert other.stream_read(f"history.{rid}") == []  # nothing written yet
            owner.before_effect()

        asyncio.run(commit())
        assert other.stream_read(f"history.{rid}") == ["kept"]
        query = f'SELECT count(*) FROM "{_schema(url)}".records WHERE root = %s'
        assert _sql(query, rid) == [(2,)]  # the start's record, and the one kept
        lease.release()
    finally:
        owner.close()
        other.close()


def test_a_write_asked_inline_is_left_for_a_thread_untried(url: str) -> None:
    """Made inline on the loop, a read goes ahead on a free connection, and a write the store
    could not make again from its start (a lease's acquire names itself with a fresh token)
    raises `WouldWait` before it is tried: nothing of it is written. With no free connection
    even a read raises it: no connection is waited for on the loop."""
    from world import _offload
    from world._offload import WouldWait

    world, other = PostgresWorld(url), PostgresWorld(url)
    try:
        engine = Engine(other, {"steps": _steps})
        rid = asyncio.run(engine.start("steps", 0))
        assert world.family_exists(rid)  # (a connection made: inline, none is waited for)
        token = _offload._INLINE.set(True)
        try:
            assert world.family_exists(rid)
            with pytest.raises(WouldWait):
                world.acquire(rid)
            fresh = PostgresWorld(url)  # its pool has no connection yet
            try:
                with pytest.raises(WouldWait):
                    fresh.family_exists(rid)
            finally:
                fresh.close()
        finally:
            _offload._INLINE.reset(token)
        other.acquire(rid).release()  # no lease was taken
    finally:
        world.close()
        other.close()


def test_consumed_deliveries_are_dropped_only_once_they_weigh(url: str) -> None:
    world = PostgresWorld(url)
    try:
        engine = Engine(world, {"steps": _steps})
        rid = asyncio.run(engine.start("steps", 0))
        ids = [world.deliver(rid, "t-x", "small") for _ in range(3)]
        assert not world.compact_inbox(rid, ids[-1] + 1)  # a few bytes: every one is kept
        assert [i.id for i in world.read_inbox(rid)[0]] == ids
        big = [world.deliver(rid, "t-x", "x" * 6000) for _ in range(3)]
        kept = world.deliver(rid, "t-x", "the next")
        assert world.compact_inbox(rid, kept)  # 18 KB consumed, less kept: dropped
        items, end = world.read_inbox(rid)
        assert [(i.id, i.payload) for i in items] == [(kept, "the next")] and end == kept + 1
        assert big[-1] < kept  # ids never move
    finally:
        world.close()


def test_a_repair_leaves_a_family_a_live_worker_drives_alone(url: str) -> None:
    world, doctor = PostgresWorld(url), PostgresWorld(url)
    try:
        rid = asyncio.run(Engine(world, {"steps": _steps}).start("steps", 1))
        s = f'"{_schema(url)}"'
        _sql(f"UPDATE {s}.records SET body = '\\x00' WHERE root = %s AND pos = 1", rid)
        assert [f.state for f in doctor.verify() if f.kind == "journal"] == ["corrupt"]
        with world.acquire(rid):
            busy = doctor.verify(repair=True)  # (its record's new size: its usage too)
            assert {(f.path, f.state) for f in busy} == {
                (f"{rid}/journal", "busy"),
                (f"{rid}/usage", "busy"),
            }
            assert _sql(f"SELECT body FROM {s}.records WHERE root = %s AND pos = 1", rid) == [
                (b"\x00",)
            ]
        done = doctor.verify(repair=True)
        assert {f.state for f in done} == {"repaired"}
        assert _sql(f"SELECT data FROM {s}.quarantine") == [(b"\x00",)]
    finally:
        world.close()
        doctor.close()


def test_a_record_s_columns_say_what_its_body_does_and_doctor_sets_them_back(url: str) -> None:
    world = PostgresWorld(url)
    s = f'"{_schema(url)}"'
    columns = f"SELECT pos, run, gen, kind FROM {s}.records WHERE root = %s ORDER BY pos"
    try:
        engine = Engine(world, {"steps": _steps})
        rid = asyncio.run(engine.start("steps", 2))
        asyncio.run(engine.run(rid))
        rows = _sql(columns, rid)
        assert [(run, gen, kind) for _, run, gen, kind in rows][:3] == [
            (rid, 0, "start"), (rid, 0, "step"), (rid, 0, "step")
        ]  # fmt: skip
        assert [kind for *_, kind in rows] == [r["t"] for _, r in engine.journal(rid)]
        _sql(f"UPDATE {s}.records SET kind = 'done', gen = 7 WHERE root = %s AND pos = 2", rid)
        [journal] = [f for f in world.verify() if f.kind == "journal"]
        assert (journal.state, journal.offset) == ("corrupt", 2) and "disagrees" in journal.detail
        [done] = world.verify(repair=True)
        assert done.state == "repaired" and "set from their bodies" in done.detail
        assert _sql(columns, rid) == rows
        assert [f.state for f in world.verify() if f.state != "ok"] == []
    finally:
        world.close()


def test_hook_lookups_of_a_leased_family_make_no_round_trip(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, other = PostgresWorld(url), PostgresWorld(url)
    try:
        rid = asyncio.run(Engine(world, {"steps": _steps}).start("steps", 1))
        lease = world.acquire(rid)
        assert world.claim_hook("tok", rid) == rid
        assert other.claim_hook("tok", "someone-else") == rid  # the database agrees

        def no_round_trip(*_: Any) -> Any:
            raise AssertionError("a round trip")

        with monkeypatch.context() as patched:
            patched.setattr(world, "_call", no_round_trip)
            assert world.hook_owner("tok") == rid and world.claim_hook("tok", rid) == rid
        world.release_hook("tok", rid)
        assert world.hook_owner("tok") is None and other.hook_owner("tok") is None
        lease.release()
        assert other.claim_hook("tok", rid) == rid
        assert world.hook_owner("tok") == rid  # not leased: asked (and not kept)
        other.release_hook("tok", rid)
        assert world.hook_owner("tok") is None
    finally:
        world.close()
        other.close()


def test_the_schema_s_store_format_is_the_data_directory_s_forms() -> None:
    # A data directory's FORMAT 3 added write-ahead files only (a schema has none): the
    # records, deliveries and stream items a schema holds are in format 2's forms, as there.
    assert STORE_FORMAT == FORMS_VERSION


def test_a_quick_unobserved_effect_leaves_its_records_to_the_next_effect(url: str) -> None:
    """A model call that ends at once: the next effect writes what was pending before it with
    what its end appended, in one commit, not two in a row; a call that lasts has its records
    committed by the commit queue's timer meanwhile (on a thread, not the loop), readable by
    another worker."""
    owner, other = PostgresWorld(url), PostgresWorld(url)
    owner._commits.wait = 0.5  # long enough for a loaded machine to take the batch first
    batches = _threads_of(owner, "_send_batch", after=True)
    try:
        rid = asyncio.run(Engine(owner, {"steps": _steps}).start("steps", 1))
        mark = [_codec.encode({"t": "mark", "run": rid})]
        lease = owner.acquire(rid)
        start = len(owner.load(rid).records)

        async def quick() -> None:
            owner.append(rid, mark)  # the step before the call
            owner.before_effect(observed=False)  # the call begins ...
            await asyncio.sleep(0.05)
            owner.append(rid, mark)  # ... and ends within the wait
            owner.before_effect()  # the next step's effect

        batches.clear()
        asyncio.run(quick())
        assert batches == ["MainThread"]
        assert len(other.load(rid).records) == start + 2

        async def lasting() -> None:
            owner.append(rid, mark)
            owner.before_effect(observed=False)
            deadline = time.monotonic() + 5
            while not batches and time.monotonic() < deadline:
                await asyncio.sleep(0.001)

        batches.clear()
        asyncio.run(lasting())
        assert len(batches) == 1 and batches[0] != "MainThread"
        assert len(other.load(rid).records) == start + 3  # written while the call runs
        lease.release()
    finally:
        owner.close()
        other.close()


def test_a_drive_reads_its_own_waiting_items_without_committing_them(url: str) -> None:
    """The drive of a held family (`DRIVING`) reads its streams' items that wait for the
    family's next commit from the lease: their length, the items and a digest continued
    over their bytes (what the database gives once they are written), with no commit and no
    round trip for what is not stored; any other reader commits them first."""
    from world._world import DRIVING

    owner, other = PostgresWorld(url), PostgresWorld(url)
    owner._commits.wait = 60.0  # (the commit queue's timer does not commit them meanwhile)
    batches = _threads_of(owner, "_send_batch", after=True)
    try:
        rid = asyncio.run(Engine(owner, {"steps": _steps}).start("steps", 1))
        name = f"events.{rid}"
        lease = owner.acquire(rid)
        for i in range(3):
            owner.stream_append(name, {"i": i})  # (no loop: each committed at once)
        stored = owner.stream_digest(name, 3)

        async def drive() -> None:
            for i in range(3, 6):
                owner.stream_append(name, {"i": i})  # waiting for the next commit
            driving = DRIVING.set(rid)
            try:
                batches.clear()
                assert owner.stream_length(name) == 6
                assert [x["i"] for x in owner.stream_read(name)] == list(range(6))
                assert [x["i"] for x in owner.stream_read(name, -2)] == [4, 5]
                assert [x["i"] for x in owner.stream_read(name, 2, 4)] == [2, 3]
                assert owner.stream_digest(name, 3) == stored
                ahead = [owner.stream_digest(name, n) for n in (4, 5, 6)]
                assert owner.stream_digest(name, 7) is None
                assert owner.stream_digest(name, 6, (4, ahead[0])) == ahead[2]
                assert batches == [] and other.stream_length(name) == 3  # nothing written
            finally:
                DRIVING.reset(driving)
            assert [x["i"] for x in owner.stream_read(name)] == list(range(6))  # (not driving)
            assert len(batches) == 1 and other.stream_length(name) == 6
            assert [other.stream_digest(name, n) for n in (4, 5, 6)] == ahead

        asyncio.run(drive())
        lease.release()
    finally:
        owner.close()
        other.close()


def _threads_of(world: PostgresWorld, name: str, *, after: bool = False) -> list[str]:
    """The names of the threads `world.<name>` is called on, from now on (`after`: each
    once the call returned, so a waiter seeing it knows the call's work is done)."""
    seen: list[str] = []
    method = getattr(world, name)

    def spied(*args: Any, **kwargs: Any) -> Any:
        if not after:
            seen.append(threading.current_thread().name)
        result = method(*args, **kwargs)
        if after:
            seen.append(threading.current_thread().name)
        return result

    setattr(world, name, spied)
    return seen


def test_a_session_driven_alone_commits_once_a_step(url: str) -> None:
    """Each step's effect commits what came before it in one transaction (one batch a step),
    and what the steps wrote is all there for another worker, each record once."""
    owner, other = PostgresWorld(url), PostgresWorld(url)
    sent = _threads_of(owner, "_send_batch")
    try:
        engine = Engine(owner, {"steps": _steps})
        rid = asyncio.run(engine.start("steps", 20))
        sent.clear()
        assert asyncio.run(engine.run(rid)).result == sum(range(20))
        assert len(sent) <= 20 + 2  # the steps' effects, and the run's end
        records = other.load(rid).records
        assert [pos for pos, _ in records] == list(range(1, len(records) + 1))
        steps = [rec["name"] for _, rec in records if rec.get("t") == "step"]
        assert steps == [f"s{i}" for i in range(20)]
    finally:
        owner.close()
        other.close()


def _pending(world: PostgresWorld, rid: str, n: int) -> list[bytes]:
    bodies = [_codec.encode({"t": "mark", "run": rid, "n": i}) for i in range(n)]
    world.append(rid, bodies)
    return bodies


def test_a_commit_over_a_broken_connection_is_written_once(url: str) -> None:
    """The pooled connection's backend ended (a database restarted, a proxy cut it): the commit
    is retried on a fresh connection, once, after looking whether the first try committed."""
    owner, other = PostgresWorld(url), PostgresWorld(url)
    try:
        rid = asyncio.run(Engine(owner, {"steps": _steps}).start("steps", 1))
        start = len(owner.load(rid).records)
        lease = owner.acquire(rid)
        pool = owner._pool_now()
        broken = pool.getconn()
        _sql("SELECT pg_terminate_backend(%s)", broken.info.backend_pid)
        pool.putconn(broken)
        _pending(owner, rid, 3)
        owner.before_effect()
        assert [rec["n"] for _, rec in other.load(rid).records[start:]] == [0, 1, 2]
        lease.release()
    finally:
        owner.close()
        other.close()


def test_a_cancelled_effect_waits_for_its_commit(url: str) -> None:
    """Cancelled while its commit is in flight: the cancellation goes through once the answer
    came (the batch is written, the family's next write goes on after it)."""
    owner, other = PostgresWorld(url), PostgresWorld(url)
    try:
        engine = Engine(owner, {"steps": _steps})
        rid = asyncio.run(engine.start("steps", 1))
        start = len(owner.load(rid).records)
        lease = owner.acquire(rid)
        send = owner._send_batch

        def slow_send(*args: Any) -> None:  # (longer than a solo drive's quick wait)
            time.sleep(0.1)
            send(*args)

        owner._send_batch = slow_send  # type: ignore[method-assign, assignment]

        async def main() -> None:
            _pending(owner, rid, 2)
            effect = asyncio.ensure_future(engine.before_effect(observed=True))
            await asyncio.sleep(0.02)  # (sent: waiting for the answer)
            effect.cancel()
            with pytest.raises(asyncio.CancelledError):
                await effect
            assert len(other.load(rid).records) == start + 2  # written before it went
            _pending(owner, rid, 1)
            await engine.before_effect(observed=True)

        asyncio.run(main())
        assert len(other.load(rid).records) == start + 3
        lease.release()
    finally:
        owner.close()
        other.close()


def test_a_fenced_worker_s_effect_is_refused(url: str) -> None:
    first, second = PostgresWorld(url), PostgresWorld(url)
    try:
        engine = Engine(first, {"steps": _steps})
        rid = asyncio.run(engine.start("steps", 1))
        stale = first.acquire(rid)
        _halt_listener(first)
        taken = second.acquire(rid, wait=5)

        async def late() -> None:
            _pending(first, rid, 1)
            with pytest.raises(OwnershipError, match="taken over"):
                await engine.before_effect(observed=True)

        asyncio.run(late())
        assert all(rec.get("t") != "mark" for _, rec in second.load(rid).records)
        taken.release()
        stale.release()
    finally:
        first.close()
        second.close()


def test_an_unobserved_effect_waits_from_its_own_start(url: str) -> None:
    """Two quick model calls in a row: the second's batch is not written at the time the
    first asked for (that batch went with the first call's next effect)."""
    owner = PostgresWorld(url)
    owner._commits.wait = 1.0
    batches = _threads_of(owner, "_send_batch", after=True)
    try:
        rid = asyncio.run(Engine(owner, {"steps": _steps}).start("steps", 1))
        mark = [_codec.encode({"t": "mark", "run": rid})]
        lease = owner.acquire(rid)

        async def two_steps() -> None:
            started = time.monotonic()
            owner.append(rid, mark)
            owner.before_effect(observed=False)  # due at 1.0 s
            await asyncio.sleep(0.05)
            owner.append(rid, mark)
            owner.before_effect()  # that batch written here
            await asyncio.sleep(0.8 - (time.monotonic() - started))
            owner.append(rid, mark)
            owner.before_effect(observed=False)  # due at 1.8 s, not at 1.0 s
            await asyncio.sleep(1.2 - (time.monotonic() - started))
            owner.append(rid, mark)
            owner.before_effect()

        batches.clear()
        asyncio.run(two_steps())
        assert batches == ["MainThread", "MainThread"]
        lease.release()
    finally:
        owner.close()


def test_a_release_commits_its_family_whatever_another_family_s_commit_raised(url: str) -> None:
    """Family A's commit failed on the queue's timer (taken over meanwhile); family B's
    appends and release still commit what B holds, then release: A's failure is A's (raised
    by A's writes and the next observed effect), not a reason to refuse or drop B's records."""
    first, second = PostgresWorld(url), PostgresWorld(url)
    try:
        engine = Engine(first, {"steps": _steps})
        a, b = asyncio.run(engine.start("steps", 1)), asyncio.run(engine.start("steps", 1))
        stale, mine = first.acquire(a), first.acquire(b)
        start = len(first.load(b).records)
        _halt_listener(first)
        taken = second.acquire(a, wait=5)

        async def refused_on_the_timer() -> None:
            _pending(first, a, 1)
            first.before_effect(observed=False)
            await asyncio.sleep(EFFECT_WAIT * 50)

        asyncio.run(refused_on_the_timer())
        _pending(first, b, 2)
        mine.release()
        assert [rec["n"] for _, rec in second.load(b).records[start:]] == [0, 1]
        with pytest.raises(OwnershipError, match="taken over"):
            first.append(a, [RECORD_BODY])
        with pytest.raises(OwnershipError, match="taken over"):
            first.before_effect()  # no effect follows while a family's records are not stored
        taken.release()
        stale.release()
    finally:
        first.close()
        second.close()
