"""Converting a schema of version 9 (the last pre-release eve's) to this eve's rows, in place.

Version 9 stored every journal record, delivery and stream item as the local store's frame,
`[1, crc32, body]` in msgpack, in one `bytea` column. `convert` runs in the migration's
transaction, under its advisory lock: the three tables are renamed aside, made again with
their columns (`schema.ROWS`, and version 10's stream items, which the later steps key by
number), filled from the old rows read in order, and the old ones dropped; a kill anywhere
before the commit leaves version 9 as it was, and the next open converts it again. A frame
whose checksum fails is converted as `eve doctor --repair` would: its bytes to
`quarantine`, a gap in its place (a record `{"t": "gap"}`, a delivery the same, a stream
item NULL).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import msgpack

from ... import _codec
from ..._family import GAP
from . import schema
from .rows import delivery_columns, record_row

CHUNK = 5000  # old rows read at a time
_ITEM = b"\x81\xa1v"  # a version-9 stream item's body: {"v": value}
_GAP_BODY = _codec.encode({"t": GAP})
# The tables converted: (name, old key columns, the new table's columns and types).
_TABLES = {
    "records": (("root", "pos"), ("root text", "pos int8", "run text", "gen int4",
                                  "kind text", "body bytea")),
    "inbox": (("root", "id", "key"), ("root text", "id int8", "key uuid", "token text",
                                      "at timestamptz", "body bytea")),
    "stream_items": (("name", "idx"), ("name text", "idx int8", "item bytea")),
}  # fmt: skip
_WHAT = {"records": "journal", "inbox": "inbox", "stream_items": "stream"}
# Version 10's stream items, keyed by name (version 12 keys them by number: `schema`'s step).
_NAMED_ITEMS = """
    CREATE TABLE {s}.stream_items (
        name text NOT NULL, idx bigint NOT NULL, item bytea, PRIMARY KEY (name, idx)
    )"""


def convert(conn: Any, s: str) -> None:
    """Bring the schema `s` (quoted) from version 9 to version 10 (see the module)."""
    conn.execute(
        f"DROP FUNCTION {s}.write_batch(text, bigint, bigint, bytea[], text[], bigint[], "
        "bytea[], boolean, text, bigint)"
    )
    for table in _TABLES:
        conn.execute(f"ALTER TABLE {s}.{table} RENAME TO v9_{table}")
        conn.execute(f"ALTER TABLE {s}.v9_{table} RENAME CONSTRAINT {table}_pkey "
                     f"TO v9_{table}_pkey")  # fmt: skip
    conn.execute(schema.ROWS.format(s=s))
    conn.execute(_NAMED_ITEMS.format(s=s))
    for table, (keys, columns) in _TABLES.items():
        _copy(conn, s, table, keys, columns)
        conn.execute(f"DROP TABLE {s}.v9_{table}")


def _copy(conn: Any, s: str, table: str, keys: tuple[str, ...], columns: tuple[str, ...]) -> None:
    """Every row of `v9_<table>`, in key order, into `<table>` (COPY, `CHUNK` at a time)."""
    names = ", ".join(c.split()[0] for c in columns)
    types = [c.split()[1] for c in columns]
    make: Callable[[tuple[Any, ...], bytes | None], tuple[Any, ...]] = (
        _RecordRows() if table == "records" else _delivery_row if table == "inbox" else _item_row
    )
    with conn.cursor(name=f"eve_convert_{table}") as old:
        old.execute(f"SELECT {', '.join(keys)}, frame FROM {s}.v9_{table} "
                    f"ORDER BY {', '.join(keys[:2])}")  # fmt: skip
        while rows := old.fetchmany(CHUNK):
            damaged: list[tuple[str, bytes]] = []
            out = []
            for row in rows:
                frame = bytes(row[-1])
                body = _body(frame)
                if table == "stream_items" and body is not None and body != _GAP_BODY:
                    body = body if body.startswith(_ITEM) else None  # (no item: damaged)
                if body is None:
                    damaged.append((f"{row[0]} at {row[1]}", frame))
                out.append(make(row[:-1], body))
            with conn.cursor().copy(f"COPY {s}.{table} ({names}) FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(types)
                for new in out:
                    cp.write_row(new)
            for where, frame in damaged:
                conn.execute(
                    f"INSERT INTO {s}.quarantine (kind, location, data, note) "
                    "VALUES (%s, %s, %s, %s)",
                    [_WHAT[table], where, frame,
                     "damaged bytes the conversion to schema version 10 replaced by a gap"],
                )  # fmt: skip


def _body(frame: bytes) -> bytes | None:
    """The body of a version-9 frame `[1, crc32, body]`; None if it is damaged."""
    try:
        obj = msgpack.unpackb(frame, raw=False)
    except Exception:
        return None
    if not (isinstance(obj, list) and len(obj) == 3 and type(obj[0]) is int and obj[0] == 1):
        return None
    crc, body = obj[1], obj[2]
    if type(crc) is not int or not isinstance(body, bytes) or zlib.crc32(body) != crc:
        return None
    return body


class _RecordRows:
    """Records in `(root, pos)` order: each run's generation followed along its family."""

    def __init__(self) -> None:
        self.root: str | None = None
        self.gens: dict[str, int] = {}

    def __call__(self, key: tuple[Any, ...], body: bytes | None) -> tuple[Any, ...]:
        root, pos = key
        if root != self.root:
            self.root, self.gens = root, {}
        if body is None:
            return root, pos, None, None, GAP, _GAP_BODY
        run, gen, kind = record_row(root, body, self.gens)
        return root, pos, run, gen, kind, body


def _delivery_row(key: tuple[Any, ...], body: bytes | None) -> tuple[Any, ...]:
    root, item_id, uuid = key
    if body is None:
        return root, item_id, uuid, None, None, _GAP_BODY
    token, at = delivery_columns(body)
    return root, item_id, uuid, token, at, body


def _item_row(key: tuple[Any, ...], body: bytes | None) -> tuple[Any, ...]:
    name, idx = key
    if body is None or not body.startswith(_ITEM):
        return name, idx, None  # damaged (kept in quarantine) or a repair's gap record
    return name, idx, body[len(_ITEM) :]
