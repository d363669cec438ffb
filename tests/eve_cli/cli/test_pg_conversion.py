"""A PostgreSQL world of the last pre-release eve (schema version 9: every record, delivery and
stream item a `[1, crc32, body]` frame in a `bytea` column) is converted in place at the first
open: every session reads, resumes and verifies as before, each row holds what a world made
by this eve holds, and a SIGKILL mid-conversion leaves the old schema, whole, which the next
open converts.

The old form is kept here, frozen: `pg_schema_9/schema.sql` (its DDL, as its migrations made
it) and `old_frame` / `_downgrade` (its row encoding). A world of version 9 is made by writing
sessions with this eve and storing every row of them again in the old form."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import psycopg
import pytest

from tests.eve_cli.cli.cli_helpers import Eve, json_lines
from tests.pg_support import fresh_schema, require_server, to_version_11, with_params
from world import PostgresWorld
from world.stores.postgres.schema import VERSION

OLD_DDL = Path(__file__).parent / "pg_schema_9" / "schema.sql"
_ITEM = b"\x81\xa1v"  # a version-9 stream item's body: {"v": value}
_GAP = msgpack.packb({"t": "gap"})
# The tables whose rows every version keeps as they are (their columns the same; a stream's
# row has its number since version 12).
_SAME = ("families", "heads", "hooks", "tails", "quarantine")
_STREAM_COLUMNS = "name, length, root, made, rewrites"


def old_frame(body: bytes) -> bytes:
    """A body as version 9 stored it: `[1, crc32(body), body]` in msgpack."""
    return bytes(msgpack.packb([1, zlib.crc32(body), body], use_bin_type=True))


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&")[0]


def _connect() -> psycopg.Connection[Any]:
    return psycopg.connect(require_server(), autocommit=True)


def _make_old(conn: psycopg.Connection[Any], schema: str) -> None:
    """An empty world of schema version 9 in `schema`."""
    conn.execute(f'CREATE SCHEMA "{schema}"')
    conn.execute(OLD_DDL.read_text(encoding="utf-8").format(s=f'"{schema}"'))


def _downgrade(conn: psycopg.Connection[Any], new: str, old: str) -> None:
    """Every row of the world in schema `new` stored again in `old` (version 9), in its form."""
    n, o = f'"{new}"', f'"{old}"'
    for table in _SAME:  # (the columns version 9 has: a later one's counts are made again)
        columns = ", ".join(
            str(row[0])
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s ORDER BY ordinal_position",
                [old, table],
            )
        )
        conn.execute(f"INSERT INTO {o}.{table} ({columns}) SELECT {columns} FROM {n}.{table}")
    conn.execute(f"INSERT INTO {o}.streams ({_STREAM_COLUMNS}) "
                 f"SELECT {_STREAM_COLUMNS} FROM {n}.streams")  # fmt: skip
    with conn.transaction():
        rows = conn.execute(f"SELECT root, pos, body FROM {n}.records").fetchall()
        conn.cursor().executemany(
            f"INSERT INTO {o}.records (root, pos, frame) VALUES (%s, %s, %s)",
            [(root, pos, old_frame(bytes(body))) for root, pos, body in rows],
        )
        rows = conn.execute(f"SELECT root, id, body, key FROM {n}.inbox").fetchall()
        conn.cursor().executemany(
            f"INSERT INTO {o}.inbox (root, id, frame, key) VALUES (%s, %s, %s, %s)",
            [(root, i, old_frame(bytes(body)), key) for root, i, body, key in rows],
        )
        rows = conn.execute(f"SELECT st.name, i.idx, i.item FROM {n}.stream_items i "
                            f"JOIN {n}.streams st ON st.id = i.stream").fetchall()  # fmt: skip
        conn.cursor().executemany(
            f"INSERT INTO {o}.stream_items (name, idx, frame) VALUES (%s, %s, %s)",
            [
                (name, idx, old_frame(_GAP if item is None else _ITEM + bytes(item)))
                for name, idx, item in rows
            ],
        )


def _rows(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    s = f'"{schema}"'
    return {
        "records": conn.execute(
            f"SELECT root, pos, run, gen, kind, body FROM {s}.records ORDER BY root, pos"
        ).fetchall(),
        "inbox": conn.execute(
            f"SELECT root, id, key, token, round(extract(epoch FROM at) * 1000), body "
            f"FROM {s}.inbox ORDER BY root, id"
        ).fetchall(),
        "stream_items": conn.execute(
            f"SELECT st.name, i.idx, i.item FROM {s}.stream_items i "
            f"JOIN {s}.streams st ON st.id = i.stream ORDER BY st.name, i.idx"
        ).fetchall(),
        "streams": conn.execute(
            f"SELECT {_STREAM_COLUMNS} FROM {s}.streams ORDER BY name"
        ).fetchall(),
        **{
            t: conn.execute(f"SELECT * FROM {s}.{t} ORDER BY 1, 2").fetchall()
            for t in ("families", "heads")
        },
    }


@pytest.fixture
def worlds() -> Iterator[tuple[str, str]]:
    """(a world made by this eve, an empty schema beside it): URLs."""
    with fresh_schema() as new, fresh_schema() as old:
        yield new, old


def test_a_world_of_the_last_pre_release_is_converted_in_place(
    eve: Eve, worlds: tuple[str, str]
) -> None:
    new, old = worlds
    sids = []
    for text in ("hello", "what time is it?"):
        out = eve("chat", "--world", new, "--json", "-p", text)
        assert out.exit_code == 0, out.output
        sids.append(json_lines(out.stdout)[0]["sessionId"])
    assert eve("chat", "--world", new, "-s", sids[0], "-p", "what time is it?").exit_code == 0
    forked = eve("fork", sids[0], "--world", new, "--json")  # records stored whole
    assert forked.exit_code == 0, forked.output
    sids.append(json.loads(forked.stdout)["sessionId"])
    with _connect() as conn:
        _make_old(conn, _schema(old))
        _downgrade(conn, _schema(new), _schema(old))
        before = [bytes(r[0]) for r in conn.execute(
            f'SELECT frame FROM "{_schema(old)}".records ORDER BY root, pos')]  # fmt: skip
        assert before and all(f.startswith(b"\x93\x01") for f in before)  # the old form
    shown = {sid: eve("inspect", sid, "--world", new, "--json").stdout for sid in sids}

    PostgresWorld(old).close()  # the first open converts
    with _connect() as conn:
        versions = conn.execute(
            f'SELECT version FROM "{_schema(old)}".schema_version ORDER BY version'
        ).fetchall()
        assert versions == [(v,) for v in range(1, 10)] + [(VERSION,)]
        converted, made = _rows(conn, _schema(old)), _rows(conn, _schema(new))
    assert converted == made  # each row as this eve writes it: columns, bodies, items
    assert any(kind == "recv" for *_, kind, _ in converted["records"])
    listed = json.loads(eve("inspect", "--world", old, "--json").stdout)
    assert sorted(row["id"] for row in listed) == sorted(sids)
    for sid in sids:  # every session reads as before, verifies, and goes on
        assert eve("inspect", sid, "--world", old, "--json").stdout == shown[sid]
    doctor = eve("doctor", "--world", old, "--json")
    assert doctor.exit_code == 0 and json.loads(doctor.stdout)["ok"] is True, doctor.output
    for sid in sids:
        more = eve("chat", "--world", old, "-s", sid, "-p", "what time is it?")
        assert more.exit_code == 0 and "It is" in more.stdout, more.output
    assert json.loads(eve("doctor", "--world", old, "--json").stdout)["ok"] is True


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as found:
        yield found


def test_a_world_of_version_11_keys_its_stream_items_by_number_in_place(eve: Eve, url: str) -> None:
    """Version 11 keyed a stream item by its stream's name; the first open numbers the
    streams and keys the items by number, each item as it was, a lost one (NULL) too."""
    sids = []
    for text in ("hello", "what time is it?"):
        out = eve("chat", "--world", url, "--json", "-p", text)
        assert out.exit_code == 0, out.output
        sids.append(json_lines(out.stdout)[0]["sessionId"])
    forked = eve("fork", sids[0], "--world", url, "--json")
    assert forked.exit_code == 0, forked.output
    sids.append(json.loads(forked.stdout)["sessionId"])
    schema = _schema(url)
    s = f'"{schema}"'
    shown = {sid: eve("inspect", sid, "--world", url, "--json").stdout for sid in sids}
    with _connect() as conn:
        made = _rows(conn, schema)
        to_version_11(conn, schema)
        conn.execute(f"INSERT INTO {s}.stream_items VALUES ('events.gone', 0, NULL)")
        items = conn.execute(f"SELECT count(*) FROM {s}.stream_items").fetchone()
        assert items is not None and items[0] == len(made["stream_items"]) + 1
    PostgresWorld(url).close()  # the first open converts
    with _connect() as conn:
        versions = conn.execute(f"SELECT version FROM {s}.schema_version").fetchall()
        assert max(versions) == (VERSION,) and (11,) in versions
        gone = conn.execute(
            f"SELECT st.length, st.root, i.idx, i.item FROM {s}.streams st "
            f"JOIN {s}.stream_items i ON i.stream = st.id WHERE st.name = 'events.gone'"
        ).fetchall()
        conn.execute(
            f"DELETE FROM {s}.stream_items WHERE stream = "
            f"(SELECT id FROM {s}.streams WHERE name = 'events.gone')"
        )
        conn.execute(f"DELETE FROM {s}.streams WHERE name = 'events.gone'")
        converted = _rows(conn, schema)
    assert gone == [(1, None, 0, None)]  # an item without a row: given one, kept as it was
    assert converted == made  # each row as it was, each item keyed by its stream's number
    for sid in sids:
        assert eve("inspect", sid, "--world", url, "--json").stdout == shown[sid]
    doctor = eve("doctor", "--world", url, "--json")
    assert doctor.exit_code == 0 and json.loads(doctor.stdout)["ok"] is True, doctor.output
    for sid in sids:
        more = eve("chat", "--world", url, "-s", sid, "-p", "what time is it?")
        assert more.exit_code == 0 and "It is" in more.stdout, more.output


def test_a_damaged_old_row_is_converted_as_a_repair_would_keeping_its_bytes() -> None:
    with fresh_schema() as url, _connect() as conn:
        s = f'"{_schema(url)}"'
        _make_old(conn, _schema(url))
        record = msgpack.packb({"t": "start", "at": 1.0, "workflow": "w", "input": None})
        bad = bytearray(old_frame(msgpack.packb({"v": "kept"})))
        bad[-1] ^= 1  # a bit flipped: its checksum fails
        conn.execute(f"INSERT INTO {s}.families (root, next_pos) VALUES ('r', 2)")
        conn.execute(f"INSERT INTO {s}.records VALUES ('r', 1, %s)", [old_frame(record)])
        conn.execute(f"INSERT INTO {s}.streams (name, length, root) VALUES ('events.r', 2, 'r')")
        conn.execute(
            f"INSERT INTO {s}.stream_items VALUES ('events.r', 0, %s), ('events.r', 1, %s)",
            [old_frame(_ITEM + msgpack.packb("ok")), bytes(bad)],
        )
        world = PostgresWorld(url)
        try:
            assert world.stream_read("events.r")[0] == "ok"
            assert type(world.stream_read("events.r")[1]).__name__ == "LostItem"
            [(kind, where, data)] = conn.execute(
                f"SELECT kind, location, data FROM {s}.quarantine"
            ).fetchall()
            assert (kind, where, bytes(data)) == ("stream", "events.r at 1", bytes(bad))
            assert conn.execute(f"SELECT run, gen, kind FROM {s}.records").fetchall() == [
                ("r", 0, "start")
            ]
        finally:
            world.close()


_OPEN = "import sys; from world import PostgresWorld; PostgresWorld(sys.argv[1]).close()"


@pytest.mark.slow
def test_a_kill_mid_conversion_leaves_the_old_schema_and_a_rerun_completes(
    tmp_path: Path,
) -> None:
    """SIGKILL while a world of many rows is converted (its rows being copied): the schema is
    still version 9, whole; the next open converts every row."""
    rows = 150_000
    record = old_frame(msgpack.packb({"t": "step", "d": 5, "name": "s", "ok": "x" * 200}))
    item = old_frame(_ITEM + msgpack.packb({"type": "step.completed", "text": "y" * 200}))
    with fresh_schema() as url, _connect() as conn:
        schema = _schema(url)
        s = f'"{schema}"'
        _make_old(conn, schema)
        conn.execute(
            f"INSERT INTO {s}.families (root, next_pos) SELECT 'f' || i, 101 "
            "FROM generate_series(0, %s) i",
            [rows // 100 - 1],
        )
        conn.execute(
            f"INSERT INTO {s}.records SELECT 'f' || (i / 100), i %% 100 + 1, %s "
            "FROM generate_series(0, %s) i",
            [record, rows - 1],
        )
        conn.execute(
            f"INSERT INTO {s}.stream_items SELECT 'events.f' || (i / 100), i %% 100, %s "
            "FROM generate_series(0, %s) i",
            [item, rows - 1],
        )
        _open_and_kill(conn, url, f"eve-convert-{schema}", "COPY%%stream_items%%")
        version = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
        assert version == (9,)
        tables = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name IN ('records', 'inbox', 'stream_items', "
            "'v9_records', 'v9_inbox', 'v9_stream_items') ORDER BY 1, 2",
            [schema],
        ).fetchall()
        assert [c for t, c in tables if t == "records"] == ["frame", "pos", "root"]
        assert not [t for t, _ in tables if t.startswith("v9_")]
        assert conn.execute(f"SELECT count(*) FROM {s}.records").fetchone() == (rows,)

        started = time.perf_counter()
        PostgresWorld(url).close()  # the rerun converts every row
        took = time.perf_counter() - started
        assert conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone() == (VERSION,)
        counts = conn.execute(
            f"SELECT (SELECT count(*) FROM {s}.records WHERE kind = 'step' AND gen IS NULL), "
            f"(SELECT count(*) FROM {s}.stream_items WHERE item IS NOT NULL)"
        ).fetchone()
        assert counts == (rows, rows)
        print(f"converted {2 * rows} rows in {took:.2f} s")  # (the figure docs quote)


@pytest.mark.slow
def test_a_kill_while_stream_items_are_numbered_leaves_version_11_and_a_rerun_completes() -> None:
    """SIGKILL while the items of a version-11 world of many rows are keyed by number: the
    schema is still version 11, its items keyed by name, whole; the next open numbers them."""
    rows = 300_000
    item = msgpack.packb({"type": "step.completed", "text": "y" * 200})
    with fresh_schema() as url, _connect() as conn:
        schema = _schema(url)
        s = f'"{schema}"'
        PostgresWorld(url).close()
        to_version_11(conn, schema)
        conn.execute(
            f"INSERT INTO {s}.streams (name, length, root) SELECT 'events.f' || i, 100, 'f' || i "
            "FROM generate_series(0, %s) i",
            [rows // 100 - 1],
        )
        conn.execute(
            f"INSERT INTO {s}.stream_items SELECT 'events.f' || (i / 100), i %% 100, %s "
            "FROM generate_series(0, %s) i",
            [item, rows - 1],
        )
        _open_and_kill(
            conn, url, f"eve-number-{schema}", "INSERT INTO%%stream_items (stream, idx, item)%%"
        )
        assert conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone() == (11,)
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name IN ('streams', 'stream_items', "
            "'v11_stream_items') ORDER BY 1, 2",
            [schema],
        ).fetchall()
        assert [c for t, c in columns if t == "stream_items"] == ["idx", "item", "name"]
        assert "id" not in [c for t, c in columns if t == "streams"]
        assert not [t for t, _ in columns if t.startswith("v11_")]
        assert conn.execute(f"SELECT count(*) FROM {s}.stream_items").fetchone() == (rows,)

        started = time.perf_counter()
        PostgresWorld(url).close()  # the rerun numbers every item
        took = time.perf_counter() - started
        assert conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone() == (VERSION,)
        counts = conn.execute(
            f"SELECT count(*), count(DISTINCT i.stream) FROM {s}.stream_items i "
            f"JOIN {s}.streams st ON st.id = i.stream AND st.name LIKE 'events.f%%'"
        ).fetchone()
        assert counts == (rows, rows // 100)
        world = PostgresWorld(url)
        try:
            assert world.stream_read("events.f7", 99) == [msgpack.unpackb(item)]
        finally:
            world.close()
        print(f"numbered {rows} stream items in {took:.2f} s")  # (the figure docs quote)


def _open_and_kill(conn: psycopg.Connection[Any], url: str, tag: str, query: str) -> None:
    """Open the world at `url` in another process, SIGKILL it while its migration runs a
    statement LIKE `query`, and wait until its server process has ended (its transaction
    rolled back)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    child = subprocess.Popen(
        [sys.executable, "-c", _OPEN, with_params(url, application_name=tag)], env=env
    )
    try:
        _wait(
            lambda: (
                conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = %s "
                    f"AND query LIKE '{query}'",
                    [tag],
                ).fetchone()
                is not None
                or child.poll() is not None
            )
        )
        assert child.poll() is None, "the conversion ended before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    _wait(
        lambda: (
            conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", [tag]
            ).fetchone()
            is None
        )
    )


def _wait(done: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
