"""A real PostgreSQL for the tests: `EVE_TEST_POSTGRES` (default the local server), one fresh
schema per test, dropped afterwards.

Outside CI an unreachable server skips the PostgreSQL cases (saying so); under CI (`CI=true`)
it fails them: there the server must run (`.ci/run` starts it).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"


def server_url() -> str:
    return os.environ.get("EVE_TEST_POSTGRES") or DEFAULT


_reachable: str | None = None  # "" reachable, else why not (asked once per test process)


def require_server() -> str:
    """The server's URL; skips (outside CI) or fails (under CI) when it cannot be reached."""
    global _reachable
    import psycopg

    if _reachable is None:
        try:
            with psycopg.connect(server_url(), connect_timeout=3):
                _reachable = ""
        except psycopg.Error as exc:
            _reachable = str(exc).strip().splitlines()[0]
    if _reachable:
        message = f"PostgreSQL at {server_url()} unreachable ({_reachable})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; under CI the PostgreSQL tests must run")
        pytest.skip(f"{message}; not under CI, so skipped (set EVE_TEST_POSTGRES)")
    return server_url()


def with_params(url: str, **params: str) -> str:
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={v}" for k, v in params.items())


@contextmanager
def fresh_schema(**params: str) -> Iterator[str]:
    """A world URL on a schema of its own, dropped (with everything in it) afterwards."""
    import psycopg

    url = require_server()
    schema = f"t_{secrets.token_hex(6)}"
    try:
        yield with_params(url, schema=schema, **params)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def fresh_database() -> Iterator[str]:
    """A world URL on a database of its own, dropped afterwards: what no other test's
    transaction can hold back (the oldest snapshot that pruning and vacuum respect is the
    database's own)."""
    import psycopg

    url = require_server()
    name = f"t_{secrets.token_hex(6)}"
    base = url.rsplit("/", 1)[0]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stored_blobs(spec: str) -> list[tuple[str, bytes]]:
    """Everything a world stored, as `(where, bytes)`: each file of a data directory, or
    each value of every column of every table of a PostgreSQL world's schema."""
    from pathlib import Path

    if not spec.startswith("postgresql://"):
        return [(str(p), p.read_bytes()) for p in Path(spec).rglob("*") if p.is_file()]
    import psycopg

    schema = spec.rsplit("schema=", 1)[1].split("&")[0]
    found: list[tuple[str, bytes]] = []
    with psycopg.connect(server_url(), autocommit=True) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = %s",
            [schema],
        ).fetchall()
        for table, column in columns:
            rows = conn.execute(f'SELECT "{column}" FROM "{schema}"."{table}"').fetchall()
            for (value,) in rows:
                if value is not None:
                    raw = bytes(value) if isinstance(value, bytes | memoryview) else str(value)
                    found.append(
                        (f"{table}.{column}", raw if isinstance(raw, bytes) else raw.encode())
                    )
    return found


def to_version_12(conn: Any, schema: str) -> None:
    """The world of this eve in `schema` stored again as schema version 12 stored it: no
    bytes counted in its families' and streams' rows."""
    s = f'"{schema}"'
    conn.execute(f"ALTER TABLE {s}.families DROP COLUMN bytes")
    conn.execute(f"ALTER TABLE {s}.streams DROP COLUMN bytes")
    conn.execute(f"DELETE FROM {s}.schema_version WHERE version > 12")
    conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (12) ON CONFLICT DO NOTHING")


def to_version_11(conn: Any, schema: str) -> None:
    """The world of this eve in `schema` stored again as schema version 11 stored it: stream
    items keyed by their stream's name, streams without a number (its DDL, frozen here)."""
    to_version_12(conn, schema)
    s = f'"{schema}"'
    conn.execute(f"ALTER TABLE {s}.stream_items RENAME TO v12_items")
    conn.execute(f"ALTER TABLE {s}.v12_items RENAME CONSTRAINT stream_items_pkey TO v12_pkey")
    conn.execute(
        f"CREATE TABLE {s}.stream_items (name text NOT NULL, idx bigint NOT NULL, item bytea, "
        "PRIMARY KEY (name, idx))"
    )
    conn.execute(
        f"INSERT INTO {s}.stream_items SELECT st.name, i.idx, i.item FROM {s}.v12_items i "
        f"JOIN {s}.streams st ON st.id = i.stream"
    )
    conn.execute(f"DROP TABLE {s}.v12_items")
    conn.execute(f"ALTER TABLE {s}.streams DROP COLUMN id")
    for when in ("UPDATE", "DELETE"):
        conn.execute(
            f"CREATE TRIGGER stream_items_{when.lower()}d AFTER {when} ON {s}.stream_items "
            f"REFERENCING OLD TABLE AS old_items FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {s}.stream_rewritten()"
        )
    conn.execute(f"DELETE FROM {s}.schema_version WHERE version > 11")
    conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (11) ON CONFLICT DO NOTHING")


@contextmanager
def throwaway_cluster() -> Iterator[tuple[str, Callable[..., None]]]:
    """A PostgreSQL cluster of its own (initdb into a temporary directory, `pg_ctl` on a free
    port of 127.0.0.1): `(url, restart)`, `restart(down)` doing what `pg_ctlcluster restart`
    does (`pg_ctl stop -m fast`, then `start`), with `down` seconds between. Stopped and
    removed afterwards; the shared server is not touched. Without the server binaries: skipped
    outside CI (saying so), failed under CI."""
    import glob
    import shutil
    import socket
    import subprocess
    import tempfile

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        message = "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/pg_ctl)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; under CI the restart test must run")
        pytest.skip(f"{message}; not under CI, so skipped (apt install postgresql)")
    bin_dir = os.path.dirname(found[-1])
    as_root = os.geteuid() == 0  # initdb refuses root: the cluster is postgres's then
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    folder = tempfile.mkdtemp(prefix="eve-pg-")
    data = os.path.join(folder, "data")
    if as_root:
        shutil.chown(folder, "postgres", "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    ctl = [*prefix, f"{bin_dir}/pg_ctl", "-D", data, "-l", f"{folder}/log", "-w", "-t", "30"]

    def run(*args: str) -> None:
        subprocess.run([*ctl, *args], check=True, capture_output=True, timeout=60)

    try:
        subprocess.run(
            [*prefix, f"{bin_dir}/initdb", "-D", data, "-A", "trust", "-U", "postgres",
             "--no-sync", "-E", "UTF8"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        run("-o", options, "start")

        def restart(down: float, mode: str = "fast") -> None:
            run("-m", mode, "stop")  # "immediate": a crash (no shutdown checkpoint)
            time.sleep(down)
            run("-o", options, "start")

        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", restart
    finally:
        subprocess.run([*ctl, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)
