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
from tests.pg_support import fresh_schema, require_server, with_params
from world import PostgresWorld
from world.stores.postgres.schema import VERSION

OLD_DDL = Path(__file__).parent / "pg_schema_9" / "schema.sql"
_ITEM = b"\x81\xa1v"  # a version-9 stream item's body: {"v": value}
_GAP = msgpack.packb({"t": "gap"})
# The tables whose rows every version keeps as they are (their columns the same).
_SAME = ("families", "heads", "hooks", "streams", "tails", "quarantine")


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
    for table in _SAME:
        conn.execute(f"INSERT INTO {o}.{table} SELECT * FROM {n}.{table}")
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
        rows = conn.execute(f"SELECT name, idx, item FROM {n}.stream_items").fetchall()
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
            f"SELECT name, idx, item FROM {s}.stream_items ORDER BY name, idx"
        ).fetchall(),
        **{
            t: conn.execute(f"SELECT * FROM {s}.{t} ORDER BY 1, 2").fetchall()
            for t in ("families", "heads", "streams")
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
        tag = f"eve-convert-{schema}"
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
        child = subprocess.Popen(
            [sys.executable, "-c", _OPEN, with_params(url, application_name=tag)], env=env
        )
        try:
            _wait(
                lambda: (
                    conn.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE application_name = %s "
                        "AND query LIKE 'COPY%%stream_items%%'",
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
        _wait(  # its server process ends (its transaction rolled back)
            lambda: (
                conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", [tag]
                ).fetchone()
                is None
            )
        )
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


def _wait(done: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
