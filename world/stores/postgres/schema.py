"""The PostgreSQL world's schema: created whole, or converted from the one before, under an
advisory lock.

A schema (PostgreSQL namespace, `eve` by default) holds one world. `schema_version` lists the
versions it went through; a world refuses a schema whose newest version it does not know (it
was migrated by a newer eve), and a reader opening a world that was never created sees it
empty instead of creating it (an older one it converts, as a writer would). A new schema is
`INITIAL`, `REST`, `ROWS`, `STREAM_ITEMS`, `WRITE_BATCH` and `MEMBERS` at `VERSION`; one at
an older version this eve knows is brought there step by step in the same transaction
(`_STEPS`: version 9 converted in place by `convert`, version 10 given `MEMBERS`, version 11's
stream items keyed by number, version 12's rows counted in bytes). Store format 2 (what
`FORMAT` says in a data directory) from the first.
"""

from __future__ import annotations

import re
from typing import Any

from ..._errors import WorldError

_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")

VERSION = 13  # the schema this eve writes
CONVERTS = 9  # the oldest it brings to VERSION (the last pre-release eve's), converted in place
STORE_FORMAT = 2  # the store format (`local.FORMS_VERSION`) every version here has

# Every table is keyed by what it is looked up by; no foreign keys (a check per insert on the
# hot path for nothing: rows of one family are removed together, by root). A record, a
# delivery and a stream item are one row each, committed whole with their transaction: no
# checksum of their own (the database's page checksums, where enabled, cover the pages).
INITIAL = """
    CREATE TABLE {s}.families (
        root text PRIMARY KEY,
        next_pos bigint NOT NULL,           -- position of the family's next record
        inbox_next bigint NOT NULL DEFAULT 0,  -- id of the next delivery
        epoch bigint NOT NULL DEFAULT 0,    -- lease epoch: +1 at every acquire (fencing)
        owner text,                         -- the world object holding the lease, or NULL
        owner_key bigint,                   -- the advisory lock its owner holds while alive
        holder text,                        -- the acquire call that took it (retries)
        lease_until timestamptz,
        created_by text,                    -- the create call (retries)
        created timestamptz NOT NULL DEFAULT now(),
        -- When the family has work (`_family.head_wake`), so that finding the families with
        -- work is one indexed query however many are parked: a unix time (-inf: now; NULL:
        -- nothing without a delivery), and the inbox mark after which a delivery gives it
        -- work (a head written after it, or a delivery while it is set, makes `due` -inf).
        due double precision DEFAULT '-Infinity',
        hook_mark bigint,
        bytes bigint NOT NULL DEFAULT 0     -- of its records' bodies (version 13: usage)
    );
    CREATE INDEX families_due ON {s}.families (due) WHERE due IS NOT NULL;
    -- The head apart from the counters every append updates (a row version each time).
    -- A head is rewritten at every drive's end, a version of up to ~2 kB (longer ones are
    -- compressed). A page is pruned of its dead versions only once its free space is below
    -- the fill factor's reserve, and at least a tenth of a page (819 bytes): a version that
    -- did not fit in a free space between 819 bytes and its size went to a new page and left
    -- the old one to vacuum (a page every few turns: ~1.2 kB a turn). Reserving 30% (2.4 kB)
    -- prunes a page before a version could not fit in it.
    CREATE TABLE {s}.heads (
        root text PRIMARY KEY,
        head bytea NOT NULL,                -- msgpack
        updated timestamptz NOT NULL DEFAULT now()
    ) WITH (fillfactor = 70);
"""
# The journal's and the inbox's rows (`convert` makes them again from version 9's).
ROWS = """
    CREATE TABLE {s}.records (
        root text NOT NULL,
        pos bigint NOT NULL,                -- its position in the family's journal, from 1
        run text,                           -- the run it belongs to: the root's id or a child's
        gen integer,                        -- that run's generation (0: from its start)
        kind text,                          -- start, gen, step, ... (`_records`); gap: a repair's
        body bytea NOT NULL,                -- the record as msgpack, in its stored form
        PRIMARY KEY (root, pos)
    );
    CREATE TABLE {s}.inbox (
        root text NOT NULL,
        id bigint NOT NULL,
        key uuid NOT NULL,                  -- the deliver call (retries)
        token text,                         -- the hook token it was delivered to
        at timestamptz,
        body bytea NOT NULL,                -- msgpack: k the token, p the payload, a the time
        PRIMARY KEY (root, id)
    );
"""
# What keeps a stream's `rewrites` (version 12) and `bytes` (13) when its stored items change.
STREAM_REWRITTEN = """
    -- A cache of stream digests trusts a stream's `made` and `rewrites`: every statement that
    -- changes or removes stored items of it counts in `rewrites` (appends change neither),
    -- and the stream's `bytes` are counted again (an append adds its own, where it writes).
    CREATE OR REPLACE FUNCTION {s}.stream_rewritten() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE {s}.streams st SET rewrites = rewrites + 1,
            bytes = (SELECT coalesce(sum(octet_length(i.item)), 0) FROM {s}.stream_items i
                WHERE i.stream = st.id)
            WHERE id IN (SELECT DISTINCT stream FROM old_items);
        RETURN NULL;
    END
    $$;
"""
# A stream's items, keyed by its row's `id` (a number, not its name: a quarter of the bytes a
# stream item takes, with its key) (version 12).
STREAM_ITEMS = (
    """
    CREATE TABLE {s}.stream_items (
        stream bigint NOT NULL,             -- its stream's `streams.id`
        idx bigint NOT NULL,
        item bytea,                         -- the item as msgpack; NULL: lost (a repair's gap)
        PRIMARY KEY (stream, idx)
    );
"""
    + STREAM_REWRITTEN
    + """
    CREATE TRIGGER stream_items_updated AFTER UPDATE ON {s}.stream_items
        REFERENCING OLD TABLE AS old_items
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.stream_rewritten();
    CREATE TRIGGER stream_items_deleted AFTER DELETE ON {s}.stream_items
        REFERENCING OLD TABLE AS old_items
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.stream_rewritten();
"""
)
WRITE_BATCH = """
    -- An owner's batch of records and stream items, in one round trip and one transaction,
    -- fenced by the lease epoch, committed synchronously (a crash of the server must not lose
    -- a batch whose owner went on giving out the positions after it). The positions and
    -- indexes were given out by the owner (it knows its family's journal end and stream
    -- lengths while it holds the lease): the records go at the journal's end, each stream's
    -- items at its stored length. A record whose generation the owner does not know (NULL)
    -- takes its run's latest stored. Returns 0 (written), 1 (the lease was taken over, or
    -- the family is gone), 2 (the journal moved), 3 (a stream moved: someone appended
    -- without the lease); nothing is written unless 0. A process without the lease that took
    -- an index this owner gave out makes the batch fail on the items' primary key. It
    -- notifies only while a world object other than its writer's tails one of the family's
    -- streams (`tails`).
    CREATE OR REPLACE FUNCTION {s}.write_batch(
        p_root text, p_epoch bigint, p_first bigint, p_bodies bytea[], p_runs text[],
        p_gens integer[], p_kinds text[], p_names text[], p_idx bigint[], p_items bytea[],
        p_chan text, p_key bigint
    ) RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        n_rec integer := coalesce(array_length(p_bodies, 1), 0);
        n_items integer := coalesce(array_length(p_names, 1), 0);
    BEGIN
        IF n_items > 0 AND EXISTS (
            SELECT 1 FROM (SELECT u.n, min(u.i) AS first FROM unnest(p_names, p_idx) AS u(n, i)
                GROUP BY u.n) b
            LEFT JOIN {s}.streams st ON st.name = b.n
            WHERE coalesce(st.length, 0) <> b.first
        ) THEN
            RETURN 3;
        END IF;
        UPDATE {s}.families SET next_pos = next_pos + n_rec,
                bytes = bytes + coalesce((SELECT sum(octet_length(b)) FROM unnest(p_bodies) b), 0)
            WHERE root = p_root AND epoch = p_epoch AND (n_rec = 0 OR next_pos = p_first);
        IF NOT FOUND THEN
            PERFORM 1 FROM {s}.families WHERE root = p_root AND epoch = p_epoch;
            RETURN CASE WHEN FOUND THEN 2 ELSE 1 END;
        END IF;
        IF n_rec > 0 THEN
            INSERT INTO {s}.records (root, pos, run, gen, kind, body)
                SELECT p_root, p_first + u.i - 1, u.run, coalesce(u.gen, (SELECT r.gen
                    FROM {s}.records r WHERE r.root = p_root AND r.run = u.run
                    ORDER BY r.pos DESC LIMIT 1)), u.kind, u.body
                FROM unnest(p_bodies, p_runs, p_gens, p_kinds) WITH ORDINALITY
                    AS u(body, run, gen, kind, i);
        END IF;
        IF n_items > 0 THEN
            WITH st AS (
                INSERT INTO {s}.streams AS s (name, length, root, bytes)
                    SELECT u.n, max(u.i) + 1, p_root, coalesce(sum(octet_length(u.item)), 0)
                    FROM unnest(p_names, p_idx, p_items) AS u(n, i, item)
                    GROUP BY u.n
                    ON CONFLICT (name) DO UPDATE SET length = greatest(s.length, excluded.length),
                        bytes = s.bytes + excluded.bytes
                    RETURNING s.id, s.name
            )
            INSERT INTO {s}.stream_items (stream, idx, item)
                SELECT st.id, u.i, u.item FROM unnest(p_names, p_idx, p_items) AS u(n, i, item)
                JOIN st ON st.name = u.n;
            IF EXISTS (SELECT 1 FROM {s}.tails WHERE root = p_root AND key <> p_key) THEN
                PERFORM pg_notify(p_chan, string_agg(DISTINCT 's' || n, ' '))
                    FROM unnest(p_names) AS n;
            END IF;
        END IF;
        RETURN 0;
    END
    $$;
"""
REST = """
    CREATE TABLE {s}.hooks (
        token text PRIMARY KEY,
        run_id text NOT NULL,
        root text NOT NULL
    );
    CREATE INDEX hooks_root ON {s}.hooks (root);
    CREATE TABLE {s}.streams (
        name text PRIMARY KEY,
        id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,  -- its items' `stream`
        length bigint NOT NULL,
        root text,                          -- the family it belongs to (`kind.<run id>`)
        made uuid NOT NULL DEFAULT gen_random_uuid(),  -- new for each stream row
        rewrites bigint NOT NULL DEFAULT 0, -- statements that changed or removed its items
        bytes bigint NOT NULL DEFAULT 0     -- of its items (version 13: usage)
    );
    CREATE INDEX streams_root ON {s}.streams (root) WHERE root IS NOT NULL;
    -- Who tails a family's streams (a batch notifies only then): the family and the tailing
    -- object's liveness key. A tail registers under a share lock of the family row, which a
    -- batch's update of it conflicts with, so a batch either sees the row or commits before
    -- the tail's first read.
    CREATE TABLE {s}.tails (
        root text NOT NULL,
        key bigint NOT NULL,
        PRIMARY KEY (root, key)
    );
    -- Where `eve doctor --repair` (and a conversion meeting damaged bytes) keeps what it
    -- replaces or moves.
    CREATE TABLE {s}.quarantine (
        id bigserial PRIMARY KEY,
        at timestamptz NOT NULL DEFAULT now(),
        kind text NOT NULL,                 -- journal | inbox | stream | head | hook
        location text NOT NULL,             -- what it was: `<root> at <position>`, ...
        data bytea NOT NULL,
        note text NOT NULL
    );
    COMMENT ON SCHEMA {s} IS 'eve world, store format 2';
"""


# Who is using the store (version 11): a row per live member (an eve worker) that advertises
# itself, what it says of itself (opaque to the world), and when it last did, by the database's
# clock (`PostgresWorld.advertise`).
MEMBERS = """
    CREATE TABLE {s}.members (
        id text PRIMARY KEY,
        facts jsonb NOT NULL,
        joined timestamptz NOT NULL DEFAULT now(),
        seen timestamptz NOT NULL DEFAULT now()
    );
"""


def store_format(schema_version: int) -> int:
    """The store format of a schema at `schema_version` (every version this eve opens: 2)."""
    return STORE_FORMAT


# Set `due` and `hook_mark` from a head's `head_wake`; a delivery after the mark came already.
WAKE_UPDATE = """UPDATE {s}.families SET hook_mark = %(mark)s::bigint,
    due = CASE WHEN inbox_next <> %(mark)s::bigint THEN '-Infinity'::float8
        ELSE %(due)s::float8 END"""


# The store's identity (`world.store_identity`): one row, its id made once, when the schema is
# created (or, for a schema made before stores had ids, at its next open); outside the numbered
# migrations, so an older eve still opens the schema.
IDENTITY = """
CREATE TABLE IF NOT EXISTS {s}.store_identity (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    created timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {s}.store_identity DEFAULT VALUES ON CONFLICT DO NOTHING;
"""


# One family's commit (`owners`): `write_batch`'s records and stream items, then, if `p_head`
# is given, the head and what it says the family waits for (`WAKE_UPDATE`'s columns), in one
# transaction and one round trip; `write_batch`'s answer (nothing is written unless 0). Made
# at every open, outside the numbered migrations, so an eve of the same schema version
# without it still opens the schema (and writes with `write_batch` alone). Its statements and
# `write_batch`'s run on generic plans, made once a connection (else each call plans each of
# them again with its values: a third of the call's time, for the same plans).
COMMIT_FAMILY = """
CREATE OR REPLACE FUNCTION {s}.commit_family(
    p_root text, p_epoch bigint, p_first bigint, p_bodies bytea[], p_runs text[],
    p_gens integer[], p_kinds text[], p_names text[], p_idx bigint[], p_items bytea[],
    p_chan text, p_key bigint, p_head bytea, p_due double precision, p_mark bigint
) RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    code integer := {s}.write_batch(p_root, p_epoch, p_first, p_bodies, p_runs, p_gens,
        p_kinds, p_names, p_idx, p_items, p_chan, p_key);
BEGIN
    IF code <> 0 OR p_head IS NULL THEN
        RETURN code;
    END IF;
    UPDATE {s}.families SET hook_mark = p_mark,
        due = CASE WHEN inbox_next <> p_mark THEN '-Infinity'::float8 ELSE p_due END
        WHERE root = p_root AND epoch = p_epoch;
    INSERT INTO {s}.heads (root, head) VALUES (p_root, p_head)
        ON CONFLICT (root) DO UPDATE SET head = excluded.head, updated = now();
    RETURN 0;
END
$$;
"""


def store_id(conn: Any, schema: str) -> str | None:
    """The id of the store in `schema` (None: no store there)."""
    try:
        row = conn.execute(f'SELECT id::text FROM "{schema}".store_identity').fetchone()
    except Exception as exc:  # psycopg.errors.UndefinedTable, without importing psycopg here
        if getattr(exc, "sqlstate", None) in ("42P01", "3F000"):  # no such table / schema
            return None
        raise
    return None if row is None else str(row[0])


def check_schema(name: str) -> str:
    if not _SCHEMA.fullmatch(name):
        raise WorldError(
            f"invalid PostgreSQL schema name {name!r}: use 1-63 of a-z 0-9 _ (not starting "
            "with a digit)"
        )
    return name


def migrate(conn: Any, schema: str, *, create: bool = True) -> bool:
    """Bring `schema` to `VERSION` (creating it if `create`); False: it does not exist and
    `create` is False. Runs in one transaction under an advisory lock, so concurrent
    workers starting together create or convert it once, and a kill leaves it as it was."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"eve-migrate:{schema}"])
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
        if exists is None and not create:
            return False
        s = f'"{schema}"'
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_version ("
            "version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()
        current = int(row[0]) if row and row[0] is not None else 0
        if current != VERSION:
            _create_or_convert(conn, schema, current)
        conn.execute(IDENTITY.format(s=s))
        conn.execute(COMMIT_FAMILY.format(s=s))
    return True


def _create_or_convert(conn: Any, schema: str, current: int) -> None:
    s = f'"{schema}"'
    if current > VERSION:
        raise WorldError(
            f"PostgreSQL schema {schema!r} is at version {current}, newer than this eve "
            f"knows (up to {VERSION}): it was migrated by a newer eve; upgrade eve"
        )
    if current == 0:
        conn.execute((INITIAL + REST + ROWS + STREAM_ITEMS + WRITE_BATCH + MEMBERS).format(s=s))
    elif CONVERTS <= current < VERSION:
        for version in range(current, VERSION):
            _STEPS[version](conn, s)
    else:
        raise WorldError(
            f"PostgreSQL schema {schema!r} is at version {current}, a pre-release form "
            f"this eve does not convert (it converts version {CONVERTS}): open it once with "
            "the eve that wrote it, updated to its last pre-release, or drop the schema"
        )
    conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", [VERSION])


def _convert_9(conn: Any, s: str) -> None:
    from .convert import convert

    convert(conn, s)


def _add_members(conn: Any, s: str) -> None:
    conn.execute(MEMBERS.format(s=s))


def _number_streams(conn: Any, s: str) -> None:
    """Version 12: version 11's stream items, keyed by their stream's name, copied in key
    order into `STREAM_ITEMS`' table, keyed by the stream row's new `id`, and the old table
    dropped (a stream with items and no row, which no eve writes, gets a row of its items'
    length); heads keep 30% of a page free (`INITIAL`)."""
    conn.execute(f"ALTER TABLE {s}.heads SET (fillfactor = 70)")
    conn.execute(f"ALTER TABLE {s}.streams ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY")
    conn.execute(f"ALTER TABLE {s}.streams ADD UNIQUE (id)")
    conn.execute(f"ALTER TABLE {s}.stream_items RENAME TO v11_stream_items")
    conn.execute(f"ALTER TABLE {s}.v11_stream_items RENAME CONSTRAINT stream_items_pkey "
                 "TO v11_stream_items_pkey")  # fmt: skip
    conn.execute(
        f"INSERT INTO {s}.streams (name, length) SELECT name, max(idx) + 1 "
        f"FROM {s}.v11_stream_items i WHERE NOT EXISTS "
        f"(SELECT 1 FROM {s}.streams st WHERE st.name = i.name) GROUP BY name"
    )
    conn.execute((STREAM_ITEMS + WRITE_BATCH).format(s=s))
    conn.execute(
        f"INSERT INTO {s}.stream_items (stream, idx, item) SELECT st.id, i.idx, i.item "
        f"FROM {s}.v11_stream_items i JOIN {s}.streams st ON st.name = i.name "
        "ORDER BY st.id, i.idx"
    )
    conn.execute(f"DROP TABLE {s}.v11_stream_items")


# A family's records' and its streams' bytes counted again from their rows (`%(root)s`; NULL:
# every family's): version 13's migration, and a repair of a family's rows.
RECOUNT_BYTES = (
    """UPDATE {s}.families f SET bytes = coalesce((SELECT sum(octet_length(r.body))
        FROM {s}.records r WHERE r.root = f.root), 0)
        WHERE %(root)s::text IS NULL OR f.root = %(root)s""",
    """UPDATE {s}.streams st SET bytes = coalesce((SELECT sum(octet_length(i.item))
        FROM {s}.stream_items i WHERE i.stream = st.id), 0)
        WHERE %(root)s::text IS NULL OR st.root = %(root)s""",
)


def recount_bytes(conn: Any, s: str, root: str | None = None) -> None:
    """Count family `root`'s bytes (None: every family's) again from its rows."""
    for statement in RECOUNT_BYTES:
        conn.execute(statement.format(s=s), {"root": root})


def _count_bytes(conn: Any, s: str) -> None:
    """Version 13: each family's records and each stream's items counted in bytes where they
    are written (`families.bytes`, `streams.bytes`: a family's usage without reading its
    rows), counted once here from the rows; `write_batch` and the trigger that keep them."""
    conn.execute(f"ALTER TABLE {s}.families ADD COLUMN bytes bigint NOT NULL DEFAULT 0")
    conn.execute(f"ALTER TABLE {s}.streams ADD COLUMN bytes bigint NOT NULL DEFAULT 0")
    recount_bytes(conn, s)
    conn.execute((STREAM_REWRITTEN + WRITE_BATCH).format(s=s))


# The step from each older version to the next, run in one transaction with the others.
_STEPS = {9: _convert_9, 10: _add_members, 11: _number_streams, 12: _count_bytes}
