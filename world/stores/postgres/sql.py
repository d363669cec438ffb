"""What a `PostgresWorld` sends: its statements (`SQL`, `{s}` the quoted schema) and the binary
array parameters a batch goes out with."""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

from . import schema as _pg_schema


class _Array(bytes):
    """A one-dimensional array of non-null values already in PostgreSQL's binary form
    (`_array`): a batch's parameters go out as they are, not dumped item by item as text
    (which cost a step more CPU than the rest of the batch's statement)."""


class _ByteaArray(_Array):
    pass


class _TextArray(_Array):
    pass


class _Int8Array(_Array):
    pass


class _Int4Array(_Array):
    pass


class _ArrayDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


class _ByteaArrayDumper(_ArrayDumper):
    oid = 1001  # bytea[]


class _TextArrayDumper(_ArrayDumper):
    oid = 1009  # text[]


class _Int8ArrayDumper(_ArrayDumper):
    oid = 1016  # bigint[]


class _Int4ArrayDumper(_ArrayDumper):
    oid = 1007  # integer[]


_ELEMENTS: dict[type[_Array], tuple[int, type[Dumper]]] = {
    _ByteaArray: (17, _ByteaArrayDumper),  # bytea
    _TextArray: (25, _TextArrayDumper),  # text
    _Int8Array: (20, _Int8ArrayDumper),  # bigint
    _Int4Array: (23, _Int4ArrayDumper),  # integer
}


def _array(kind: type[_Array], values: Sequence[bytes | None]) -> _Array:
    """`values` (each an element's binary form, None a NULL) as a `kind` array in binary
    form."""
    element = _ELEMENTS[kind][0]
    if not values:
        return kind(struct.pack("!iii", 0, 0, element))
    nulls = None in values
    head = struct.pack("!iiiii", 1, int(nulls), element, len(values), 1)
    if not nulls:
        return kind(
            head + b"".join([struct.pack("!i", len(v)) + v for v in values if v is not None])
        )
    return kind(
        head + b"".join([_NULL if v is None else struct.pack("!i", len(v)) + v for v in values])
    )


_NULL = struct.pack("!i", -1)


def _int4_array(values: Sequence[int | None]) -> _Array:
    return _array(_Int4Array, [None if v is None else struct.pack("!i", v) for v in values])


def _int8_array(values: Sequence[int]) -> _Array:
    if not values:
        return _array(_Int8Array, [])
    head = struct.pack("!iiiii", 1, 0, 20, len(values), 1)
    pairs = [x for v in values for x in (8, v)]
    return _Int8Array(head + struct.pack("!" + "iq" * len(values), *pairs))


def _configure(conn: psycopg.Connection[Any]) -> None:
    """A pooled connection: the binary array parameters are sent as they are."""
    for kind, (_, dumper) in _ELEMENTS.items():
        conn.adapters.register_dumper(kind, dumper)


def _server_of(conn: psycopg.Connection[Any]) -> str:
    """Which server run `conn` talks to: its start time and system identifier (both change
    when it restarts, or another server takes its place)."""
    row = conn.execute(
        "SELECT pg_postmaster_start_time()::text || ' ' || system_identifier::text "
        "FROM pg_control_system()"
    ).fetchone()
    return str(row[0]) if row else ""


class _OneLine(logging.Filter):
    """The pool's log records in one line each (a driver error is several: server, hint)."""

    def filter(self, record: logging.LogRecord) -> bool:
        lines = record.getMessage().strip().splitlines()
        record.msg, record.args = (lines[0] if lines else ""), None
        return True


logging.getLogger("psycopg.pool").addFilter(_OneLine())


def _reason(exc: BaseException) -> str:
    """The first line of a driver error, which names no password."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# Statements, `{s}` the quoted schema. Each is one transaction (autocommit).
# An owner is alive while its liveness lock is held, and taken for alive for a lease's time
# after the server started (a restart frees every lock: its owners take theirs again as soon
# as they reconnect, and their batches in flight commit instead of their sessions being taken
# over, their tools run again).
_ALIVE = """(EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
    AND l.classid = (f.owner_key >> 32)::oid AND l.objid = (f.owner_key & 4294967295)::oid
    AND l.objsubid = 1)
    OR pg_postmaster_start_time() > now() - {lease} * interval '1 second')"""
# The items of the stream named `name` are keyed by its row's number.
_STREAM = "(SELECT id FROM {s}.streams WHERE name = %(name)s)"
SQL: dict[str, str] = {
    "create": """
        WITH f AS (
            INSERT INTO {s}.families (root, next_pos, created_by, bytes)
            VALUES (%(root)s, %(next)s, %(token)s, coalesce((SELECT sum(octet_length(b))
                FROM unnest(%(bodies)s::bytea[]) b), 0))
            ON CONFLICT (root) DO NOTHING RETURNING root
        ), r AS (
            INSERT INTO {s}.records (root, pos, run, gen, kind, body)
            SELECT f.root, u.i, u.run, u.gen, u.kind, u.body
            FROM f, unnest(%(bodies)s::bytea[], %(runs)s::text[], %(gens)s::integer[],
                %(kinds)s::text[]) WITH ORDINALITY AS u(body, run, gen, kind, i)
        )
        SELECT count(*) FROM f""",
    "fork": """
        WITH f AS (
            INSERT INTO {s}.families (root, next_pos, created_by, bytes)
            VALUES (%(root)s, %(next)s, %(token)s, coalesce((SELECT sum(octet_length(b))
                FROM unnest(%(bodies)s::bytea[]) b), 0))
            ON CONFLICT (root) DO NOTHING RETURNING root
        ), r AS (
            INSERT INTO {s}.records (root, pos, run, gen, kind, body)
            SELECT f.root, u.i, u.run, u.gen, u.kind, u.body
            FROM f, unnest(%(bodies)s::bytea[], %(runs)s::text[], %(gens)s::integer[],
                %(kinds)s::text[]) WITH ORDINALITY AS u(body, run, gen, kind, i)
        ), st AS (
            INSERT INTO {s}.streams (name, length, root, bytes)
            SELECT u.name, u.n, u.root, coalesce((SELECT sum(octet_length(i.item))
                FROM {s}.streams src JOIN {s}.stream_items i ON i.stream = src.id
                WHERE src.name = u.source AND i.idx < u.n), 0)
            FROM f, unnest(%(names)s::text[], %(counts)s::bigint[], %(roots)s::text[],
                %(sources)s::text[]) AS u(name, n, root, source)
            RETURNING id, name
        ), si AS (
            INSERT INTO {s}.stream_items (stream, idx, item)
            SELECT st.id, i.idx, i.item
            FROM unnest(%(names)s::text[], %(sources)s::text[], %(counts)s::bigint[])
                AS u(name, source, n)
            JOIN st ON st.name = u.name
            JOIN {s}.streams src ON src.name = u.source
            JOIN {s}.stream_items i ON i.stream = src.id AND i.idx < u.n
        ), h AS (
            INSERT INTO {s}.hooks (token, run_id, root)
            SELECT u.token, u.run, f.root
            FROM f, unnest(%(tokens)s::text[], %(runs)s::text[]) AS u(token, run)
        )
        SELECT count(*) FROM f""",
    "created_by": "SELECT created_by FROM {s}.families WHERE root = %(root)s",
    "families": 'SELECT root FROM {s}.families ORDER BY root COLLATE "C"',
    "family": "SELECT 1 FROM {s}.families WHERE root = %(root)s",
    "load": "SELECT pos, run, gen, body FROM {s}.records WHERE root = %(root)s "
    "AND pos >= %(start)s ORDER BY pos",
    "load_range": "SELECT pos, body FROM {s}.records WHERE root = %(root)s "
    "AND pos >= %(start)s AND pos < %(end)s ORDER BY pos",
    "lease_state": "SELECT epoch, next_pos FROM {s}.families WHERE root = %(root)s",
    "read_head": "SELECT head FROM {s}.heads WHERE root = %(root)s",
    # With what the head says the family waits for (`head_wake`: the sweep's index).
    "write_head_free": f"""
        WITH f AS (
            {_pg_schema.WAKE_UPDATE.replace("families", "families f")}
            WHERE root = %(root)s AND (owner IS NULL OR lease_until < now() OR NOT {_ALIVE})
            RETURNING root
        )
        INSERT INTO {{s}}.heads (root, head) SELECT root, %(head)s FROM f
        ON CONFLICT (root) DO UPDATE SET head = excluded.head, updated = now()""",
    "deliver": """
        WITH f AS (
            UPDATE {s}.families SET inbox_next = inbox_next + 1,
                due = CASE WHEN hook_mark IS NULL THEN due ELSE '-Infinity' END
            WHERE root = %(root)s RETURNING inbox_next - 1 AS id
        ), i AS (
            INSERT INTO {s}.inbox (root, id, key, token, at, body)
            SELECT %(root)s, f.id, %(key)s, %(token)s, to_timestamp(%(at)s), %(body)s FROM f
            RETURNING id
        )
        SELECT id, pg_notify(%(chan)s, %(note)s) FROM i""",
    "delivered": "SELECT id FROM {s}.inbox WHERE root = %(root)s AND key = %(key)s",
    "read_inbox": """
        SELECT f.inbox_next, i.id, i.body FROM {s}.families f
        LEFT JOIN {s}.inbox i ON i.root = f.root AND i.id >= %(start)s
        WHERE f.root = %(root)s ORDER BY i.id""",
    # Like the local world's: only once the consumed deliveries take COMPACT_MIN bytes and no
    # fewer than the ones kept (a short inbox keeps every delivery, for anyone auditing it).
    "compact_inbox": """
        DELETE FROM {s}.inbox WHERE root = %(root)s AND id < %(keep)s AND (
            SELECT coalesce(sum(octet_length(body)) FILTER (WHERE id < %(keep)s), 0)
                >= greatest(%(least)s, coalesce(sum(octet_length(body))
                    FILTER (WHERE id >= %(keep)s), 0))
            FROM {s}.inbox WHERE root = %(root)s)""",
    "inbox_end": "SELECT inbox_next FROM {s}.families WHERE root = %(root)s",
    "claim_hook": """
        WITH i AS (
            INSERT INTO {s}.hooks (token, run_id, root) VALUES (%(token)s, %(run)s, %(root)s)
            ON CONFLICT (token) DO NOTHING RETURNING run_id
        )
        SELECT run_id FROM i UNION ALL SELECT run_id FROM {s}.hooks WHERE token = %(token)s
        LIMIT 1""",
    "hook_owner": "SELECT run_id FROM {s}.hooks WHERE token = %(token)s",
    "release_hook": "DELETE FROM {s}.hooks WHERE token = %(token)s AND run_id = %(run)s",
    "acquire": f"""
        UPDATE {{s}}.families f SET epoch = epoch + 1, owner = %(me)s, owner_key = %(key)s,
            holder = %(holder)s, lease_until = now() + %(ttl)s * interval '1 second'
        WHERE root = %(root)s AND (owner IS NULL OR holder = %(holder)s
            OR lease_until < now() OR NOT {_ALIVE})
        RETURNING epoch, next_pos""",
    "release": """
        UPDATE {s}.families SET owner = NULL, holder = NULL, lease_until = NULL
        WHERE root = %(root)s AND epoch = %(epoch)s""",
    "renew": """
        UPDATE {s}.families f SET lease_until = now() + %(ttl)s * interval '1 second'
        FROM unnest(%(roots)s::text[], %(epochs)s::bigint[]) AS u(root, epoch)
        WHERE f.root = u.root AND f.epoch = u.epoch
        RETURNING f.root""",
    "stream_append": """
        WITH s AS (
            INSERT INTO {s}.streams (name, length, root, bytes)
            VALUES (%(name)s, 1, %(root)s, octet_length(%(item)s::bytea))
            ON CONFLICT (name) DO UPDATE SET length = {s}.streams.length + 1,
                bytes = {s}.streams.bytes + excluded.bytes
            RETURNING id, length - 1 AS idx
        ), i AS (
            INSERT INTO {s}.stream_items (stream, idx, item)
            SELECT s.id, s.idx, %(item)s FROM s RETURNING idx
        )
        SELECT idx, pg_notify(%(chan)s, %(note)s) FROM i""",
    # An append to a family's stream by a process not owning the family: only while no live
    # owner holds it (an owner gives out the stream's indexes itself, from the lengths it read
    # when it took the lease). The share lock of the family row makes a takeover wait for this
    # append, so the lengths it reads include it.
    "stream_append_free": f"""
        WITH f AS (
            SELECT root FROM {{s}}.families f WHERE root = %(root)s
                AND (owner IS NULL OR lease_until < now() OR NOT {_ALIVE}) FOR SHARE
        ), s AS (
            INSERT INTO {{s}}.streams (name, length, root, bytes)
            SELECT %(name)s, 1, f.root, octet_length(%(item)s::bytea) FROM f
            ON CONFLICT (name) DO UPDATE SET length = {{s}}.streams.length + 1,
                bytes = {{s}}.streams.bytes + excluded.bytes
            RETURNING id, length - 1 AS idx
        ), i AS (
            INSERT INTO {{s}}.stream_items (stream, idx, item)
            SELECT s.id, s.idx, %(item)s FROM s RETURNING idx
        )
        SELECT idx, pg_notify(%(chan)s, %(note)s) FROM i""",
    "commit_family": """
        SELECT {s}.commit_family(%(root)s, %(epoch)s, %(first)s, %(bodies)b, %(runs)b,
            %(gens)b, %(kinds)b, %(names)b, %(idx)b, %(items)b, %(chan)s, %(key)s,
            %(head)s::bytea, %(due)s::float8, %(mark)s::bigint)""",
    "stream_item": f"SELECT item FROM {{s}}.stream_items WHERE stream = {_STREAM} "
    "AND idx = %(idx)s",
    # The share lock of the family row waits for a batch in flight (which then committed
    # before the tail's first read) or makes the next one wait and see the row. The rows of
    # objects no longer alive (their liveness lock is free) go.
    "tail_on": f"""
        WITH d AS (
            DELETE FROM {{s}}.tails f WHERE f.root = %(root)s AND f.key <> %(key)s
                AND NOT {_ALIVE.replace("f.owner_key", "f.key")}
        ), t AS (
            INSERT INTO {{s}}.tails (root, key) VALUES (%(root)s, %(key)s) ON CONFLICT DO NOTHING
        )
        SELECT 1 FROM {{s}}.families WHERE root = %(root)s FOR SHARE""",
    "tails_off": "DELETE FROM {s}.tails WHERE key = %(key)s",
    "tails_again": """
        INSERT INTO {s}.tails (root, key) SELECT r, %(key)s FROM unnest(%(roots)s::text[]) r
        ON CONFLICT DO NOTHING""",
    "tail_off": "DELETE FROM {s}.tails WHERE root = %(root)s AND key = %(key)s",
    "family_lengths": "SELECT name, length FROM {s}.streams WHERE root = %(root)s",
    "stream_last": f"SELECT idx, item FROM {{s}}.stream_items WHERE stream = {_STREAM} "
    "ORDER BY idx DESC LIMIT 8",
    # (`end` in the index condition, not a filter: a generic plan of `end IS NULL OR idx <
    # end` scanned every item from `start` to the stream's end, the whole events stream of a
    # long session to read its first 16 events)
    "stream_read": f"SELECT idx, item FROM {{s}}.stream_items WHERE stream = {_STREAM} "
    "AND idx >= %(start)s AND idx < coalesce(%(end)s::bigint, 9223372036854775807) "
    "ORDER BY idx",
    "stream_length": "SELECT length FROM {s}.streams WHERE name = %(name)s",
    # A stream's row (its length and what a kept digest trusts) with its items from `start`
    # up to `end` (one row with NULL items when there are none).
    "stream_digest": """
        SELECT st.length, st.made, st.rewrites, i.idx, i.item FROM {s}.streams st
        LEFT JOIN {s}.stream_items i ON i.stream = st.id AND i.idx >= %(start)s
            AND i.idx < %(end)s
        WHERE st.name = %(name)s ORDER BY i.idx""",
    "heads": """
        SELECT f.root, h.head, f.inbox_next FROM {s}.families f
        LEFT JOIN {s}.heads h ON h.root = f.root ORDER BY f.root COLLATE "C"
        """,
    "heads_of": """
        SELECT f.root, h.head, f.inbox_next FROM {s}.families f
        LEFT JOIN {s}.heads h ON h.root = f.root WHERE f.root = ANY(%(roots)s)
        ORDER BY f.root COLLATE "C"
        """,
    # The families with work now and no live owner, from the partial index of `due`: the
    # families parked on a hook with nothing new or on a timer not due are not read at all.
    "runnable_heads": f"""
        SELECT f.root, h.head, f.inbox_next FROM {{s}}.families f
        LEFT JOIN {{s}}.heads h ON h.root = f.root
        WHERE f.due <= %(now)s
            AND (f.owner IS NULL OR f.lease_until < now() OR NOT {_ALIVE})
        ORDER BY f.root COLLATE "C"
        """,
    "stream_versions": """
        SELECT name, length, xmin::text FROM {s}.streams WHERE name = ANY(%(names)s::text[])""",
    "stream_names": 'SELECT name FROM {s}.streams ORDER BY name COLLATE "C"',
    "family_streams": "SELECT name FROM {s}.streams WHERE root = %(root)s "
    'ORDER BY name COLLATE "C"',
    "remnants": """
        SELECT root FROM (SELECT root FROM {s}.streams WHERE root IS NOT NULL
            UNION SELECT root FROM {s}.hooks) r
        WHERE NOT EXISTS (SELECT 1 FROM {s}.families f WHERE f.root = r.root)
        ORDER BY root COLLATE "C"
        """,
    # (the records' and streams' bytes as counted where they are written: no row read; the
    # inbox, compacted as it is consumed, and the head are small)
    "usage": """
        WITH st AS (
            SELECT bytes FROM {s}.streams
            WHERE (%(names)s::text[] IS NULL AND root = %(root)s) OR name = ANY(%(names)s::text[])
        ), sizes AS (
            SELECT coalesce(sum(bytes), 0) AS n FROM {s}.families WHERE root = %(root)s
            UNION ALL SELECT coalesce(sum(octet_length(body)), 0) FROM {s}.inbox
                WHERE root = %(root)s
            UNION ALL SELECT coalesce(sum(octet_length(head)), 0) FROM {s}.heads
                WHERE root = %(root)s
            UNION ALL SELECT coalesce(sum(bytes), 0) FROM st
        ), f AS (
            SELECT greatest(f.created, h.updated, (SELECT i.at FROM {s}.inbox i
                WHERE i.root = f.root ORDER BY i.id DESC LIMIT 1)) AS at
            FROM {s}.families f
            LEFT JOIN {s}.heads h ON h.root = f.root WHERE f.root = %(root)s
        )
        SELECT (SELECT sum(n) FROM sizes), extract(epoch FROM (SELECT at FROM f))
        WHERE EXISTS (SELECT 1 FROM f) OR EXISTS (SELECT 1 FROM st)""",
    "remove_lock": "SELECT epoch, inbox_next FROM {s}.families WHERE root = %(root)s FOR UPDATE",
    "remove": """
        WITH h AS (DELETE FROM {s}.hooks WHERE root = %(root)s),
        t AS (DELETE FROM {s}.tails WHERE root = %(root)s),
        st AS (DELETE FROM {s}.streams WHERE root = %(root)s RETURNING id),
        si AS (DELETE FROM {s}.stream_items WHERE stream IN (SELECT id FROM st)),
        i AS (DELETE FROM {s}.inbox WHERE root = %(root)s),
        hd AS (DELETE FROM {s}.heads WHERE root = %(root)s),
        r AS (DELETE FROM {s}.records WHERE root = %(root)s)
        DELETE FROM {s}.families WHERE root = %(root)s""",
}
