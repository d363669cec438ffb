"""The PostgreSQL world's schema: numbered migrations, applied under an advisory lock.

A schema (PostgreSQL namespace, `eve` by default) holds one world. `schema_version` lists
the migrations applied; a world refuses a schema whose newest version it does not know (it
was migrated by a newer eve), and a reader opening a world that was never created sees it
empty instead of creating it (an older one it migrates, as a writer would).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..._errors import WorldError

_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# Every table is keyed by what it is looked up by; no foreign keys (a check per insert on the
# hot path for nothing: rows of one family are removed together, by root).
MIGRATIONS: list[str] = [
    # 1: families (journal counters, lease), heads, records, inbox, hooks, streams.
    """
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
        created timestamptz NOT NULL DEFAULT now()
    );
    -- The head apart from the counters every append updates (a row version each time).
    CREATE TABLE {s}.heads (
        root text PRIMARY KEY,
        head bytea NOT NULL,
        updated timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE {s}.records (
        root text NOT NULL,
        pos bigint NOT NULL,
        frame bytea NOT NULL,
        PRIMARY KEY (root, pos)
    );
    CREATE TABLE {s}.inbox (
        root text NOT NULL,
        id bigint NOT NULL,
        frame bytea NOT NULL,
        key uuid NOT NULL,                  -- the deliver call (retries)
        PRIMARY KEY (root, id)
    );
    CREATE TABLE {s}.hooks (
        token text PRIMARY KEY,
        run_id text NOT NULL,
        root text NOT NULL
    );
    CREATE INDEX hooks_root ON {s}.hooks (root);
    CREATE TABLE {s}.streams (
        name text PRIMARY KEY,
        length bigint NOT NULL,
        root text                           -- the family it belongs to (`kind.<run id>`)
    );
    CREATE INDEX streams_root ON {s}.streams (root) WHERE root IS NOT NULL;
    CREATE TABLE {s}.stream_items (
        name text NOT NULL,
        idx bigint NOT NULL,
        frame bytea NOT NULL,
        PRIMARY KEY (name, idx)
    );
    """,
    # 2: an owner's batch of stream items, with the journal records after them or alone, in
    # one round trip and one transaction, fenced by the lease epoch. The items' indexes were
    # given out by the owner (it knows its family's stream lengths while it holds the lease),
    # so each stream must still be as long as the owner believes. Returns 0 (written), 1 (the
    # lease was taken over, or the family is gone), 2 (the journal moved), 3 (a stream moved:
    # someone appended without the lease); nothing is written unless 0.
    """
    CREATE FUNCTION {s}.write_batch(
        p_root text, p_epoch bigint, p_first bigint, p_frames bytea[],
        p_names text[], p_idx bigint[], p_items bytea[], p_lazy boolean, p_chan text
    ) RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        f_epoch bigint;
        f_next bigint;
        n_rec integer := coalesce(array_length(p_frames, 1), 0);
        st record;
        cur bigint;
    BEGIN
        IF p_lazy THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        -- The row lock makes a takeover (which updates the row) wait for this write.
        SELECT epoch, next_pos INTO f_epoch, f_next FROM {s}.families
            WHERE root = p_root FOR SHARE;
        IF NOT FOUND OR f_epoch <> p_epoch THEN
            RETURN 1;
        END IF;
        IF n_rec > 0 AND f_next <> p_first THEN
            RETURN 2;
        END IF;
        FOR st IN SELECT u.n, min(u.i) AS first, count(*) AS cnt
                FROM unnest(p_names, p_idx) AS u(n, i) GROUP BY u.n LOOP
            SELECT length INTO cur FROM {s}.streams WHERE name = st.n FOR UPDATE;
            IF coalesce(cur, 0) <> st.first THEN
                RETURN 3;
            END IF;
        END LOOP;
        IF n_rec > 0 THEN
            UPDATE {s}.families SET next_pos = next_pos + n_rec WHERE root = p_root;
            INSERT INTO {s}.records (root, pos, frame)
                SELECT p_root, p_first + u.i - 1, u.frame
                FROM unnest(p_frames) WITH ORDINALITY AS u(frame, i);
        END IF;
        IF coalesce(array_length(p_names, 1), 0) > 0 THEN
            INSERT INTO {s}.streams AS s (name, length, root)
                SELECT u.n, max(u.i) + 1, p_root FROM unnest(p_names, p_idx) AS u(n, i)
                GROUP BY u.n
                ON CONFLICT (name) DO UPDATE SET length = excluded.length;
            INSERT INTO {s}.stream_items (name, idx, frame)
                SELECT * FROM unnest(p_names, p_idx, p_items);
            PERFORM pg_notify(p_chan, 's' || n) FROM (SELECT DISTINCT unnest(p_names) AS n) d;
        END IF;
        RETURN 0;
    END
    $$;
    """,
    # 3: when a family has work (from its head, `_family.head_wake`), so that finding the
    # families with work is one indexed query however many are parked: `due`, a unix time
    # (-inf: now; NULL: nothing without a delivery), `hook_mark`, the inbox mark after which
    # a delivery gives it work: a head written after it, or a delivery while it is set, makes
    # `due` -inf (both update the row, so neither misses the other). Existing families are
    # filled in from their heads (`FILLS`).
    """
    ALTER TABLE {s}.families ADD COLUMN due double precision DEFAULT '-Infinity',
        ADD COLUMN hook_mark bigint;
    CREATE INDEX families_due ON {s}.families (due) WHERE due IS NOT NULL;
    """,
    # 4: where `eve doctor --repair` keeps what it replaces or moves (`_pg_verify`).
    """
    CREATE TABLE {s}.quarantine (
        id bigserial PRIMARY KEY,
        at timestamptz NOT NULL DEFAULT now(),
        kind text NOT NULL,                 -- journal | inbox | stream | head | hook
        location text NOT NULL,             -- what it was: `<root> at <position>`, ...
        data bytea NOT NULL,
        note text NOT NULL
    );
    """,
    # 5: store format 2 (`_migrate`, what FORMAT says in a data directory): the record forms
    # frozen for 0.1. PostgresWorld came with them, so the world's own part of 1 -> 2 has
    # nothing to do here; what its user registered for format 2 runs over every record
    # (`FILLS`).
    """
    COMMENT ON SCHEMA {s} IS 'eve world, store format 2';
    """,
    # 6: `write_batch` in fewer statements (the same arguments and answers): one update of the
    # family row checks the epoch and the journal end, and takes the row lock a takeover waits
    # for; a stream appended to by a process without the lease is found by its items' primary
    # key (the other process took an index this owner gave out: unique_violation, the whole
    # batch rolled back) instead of a check of each stream's length; one notification names
    # every stream of the batch (`s<name> s<name>...`).
    """
    CREATE OR REPLACE FUNCTION {s}.write_batch(
        p_root text, p_epoch bigint, p_first bigint, p_frames bytea[],
        p_names text[], p_idx bigint[], p_items bytea[], p_lazy boolean, p_chan text
    ) RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        n_rec integer := coalesce(array_length(p_frames, 1), 0);
    BEGIN
        IF p_lazy THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        UPDATE {s}.families SET next_pos = next_pos + n_rec
            WHERE root = p_root AND epoch = p_epoch AND (n_rec = 0 OR next_pos = p_first);
        IF NOT FOUND THEN
            PERFORM 1 FROM {s}.families WHERE root = p_root AND epoch = p_epoch;
            RETURN CASE WHEN FOUND THEN 2 ELSE 1 END;
        END IF;
        IF n_rec > 0 THEN
            INSERT INTO {s}.records (root, pos, frame)
                SELECT p_root, p_first + u.i - 1, u.frame
                FROM unnest(p_frames) WITH ORDINALITY AS u(frame, i);
        END IF;
        IF coalesce(array_length(p_names, 1), 0) > 0 THEN
            INSERT INTO {s}.streams AS s (name, length, root)
                SELECT u.n, max(u.i) + 1, p_root FROM unnest(p_names, p_idx) AS u(n, i)
                GROUP BY u.n
                ON CONFLICT (name) DO UPDATE SET length = greatest(s.length, excluded.length);
            INSERT INTO {s}.stream_items (name, idx, frame)
                SELECT * FROM unnest(p_names, p_idx, p_items);
            PERFORM pg_notify(p_chan, string_agg(DISTINCT 's' || n, ' '))
                FROM unnest(p_names) AS n;
        END IF;
        RETURN 0;
    END
    $$;
    """,
    # 7: a batch notifies only while a world object other than its writer's tails one of the
    # family's streams (`tails`: the family and the tailing object's liveness key; a tail of
    # a process that died leaves a row, which only costs notifications). A tail registers
    # under a share lock of the family row, which a batch's update of it conflicts with, so
    # a batch either sees the row or commits before the tail's first read. The writer wakes
    # its own tails itself. (Written to run again over a schema a test set back.)
    """
    CREATE TABLE IF NOT EXISTS {s}.tails (
        root text NOT NULL,
        key bigint NOT NULL,
        PRIMARY KEY (root, key)
    );
    DROP FUNCTION IF EXISTS {s}.write_batch(text, bigint, bigint, bytea[], text[], bigint[],
        bytea[], boolean, text);
    CREATE OR REPLACE FUNCTION {s}.write_batch(
        p_root text, p_epoch bigint, p_first bigint, p_frames bytea[],
        p_names text[], p_idx bigint[], p_items bytea[], p_lazy boolean, p_chan text,
        p_key bigint
    ) RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        n_rec integer := coalesce(array_length(p_frames, 1), 0);
    BEGIN
        IF p_lazy THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        UPDATE {s}.families SET next_pos = next_pos + n_rec
            WHERE root = p_root AND epoch = p_epoch AND (n_rec = 0 OR next_pos = p_first);
        IF NOT FOUND THEN
            PERFORM 1 FROM {s}.families WHERE root = p_root AND epoch = p_epoch;
            RETURN CASE WHEN FOUND THEN 2 ELSE 1 END;
        END IF;
        IF n_rec > 0 THEN
            INSERT INTO {s}.records (root, pos, frame)
                SELECT p_root, p_first + u.i - 1, u.frame
                FROM unnest(p_frames) WITH ORDINALITY AS u(frame, i);
        END IF;
        IF coalesce(array_length(p_names, 1), 0) > 0 THEN
            INSERT INTO {s}.streams AS s (name, length, root)
                SELECT u.n, max(u.i) + 1, p_root FROM unnest(p_names, p_idx) AS u(n, i)
                GROUP BY u.n
                ON CONFLICT (name) DO UPDATE SET length = greatest(s.length, excluded.length);
            INSERT INTO {s}.stream_items (name, idx, frame)
                SELECT * FROM unnest(p_names, p_idx, p_items);
            IF EXISTS (SELECT 1 FROM {s}.tails WHERE root = p_root AND key <> p_key) THEN
                PERFORM pg_notify(p_chan, string_agg(DISTINCT 's' || n, ' '))
                    FROM unnest(p_names) AS n;
            END IF;
        END IF;
        RETURN 0;
    END
    $$;
    """,
    # 8: what a cache of stream digests may trust (`PostgresWorld.stream_digest`): `made`,
    # new for each stream row (a stream removed and made again is another), and `rewrites`,
    # counting the statements that changed or removed stored items of it (a repair's gap
    # records, anything else that updates or deletes one); appends change neither.
    """
    ALTER TABLE {s}.streams ADD COLUMN IF NOT EXISTS made uuid NOT NULL
            DEFAULT gen_random_uuid(),
        ADD COLUMN IF NOT EXISTS rewrites bigint NOT NULL DEFAULT 0;
    CREATE OR REPLACE FUNCTION {s}.stream_rewritten() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE {s}.streams SET rewrites = rewrites + 1
            WHERE name IN (SELECT DISTINCT name FROM old_items);
        RETURN NULL;
    END
    $$;
    DROP TRIGGER IF EXISTS stream_items_updated ON {s}.stream_items;
    CREATE TRIGGER stream_items_updated AFTER UPDATE ON {s}.stream_items
        REFERENCING OLD TABLE AS old_items
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.stream_rewritten();
    DROP TRIGGER IF EXISTS stream_items_deleted ON {s}.stream_items;
    CREATE TRIGGER stream_items_deleted AFTER DELETE ON {s}.stream_items
        REFERENCING OLD TABLE AS old_items
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.stream_rewritten();
    """,
    # 9: every batch commits synchronously (`p_lazy` is no longer read): a crash of the
    # server must not lose a batch whose owner went on giving out the positions after it.
    # And a stream's items of a batch go at the stream's stored length: a batch after a lost
    # one is refused (3) instead of leaving a hole.
    """
    CREATE OR REPLACE FUNCTION {s}.write_batch(
        p_root text, p_epoch bigint, p_first bigint, p_frames bytea[],
        p_names text[], p_idx bigint[], p_items bytea[], p_lazy boolean, p_chan text,
        p_key bigint
    ) RETURNS integer LANGUAGE plpgsql AS $$
    DECLARE
        n_rec integer := coalesce(array_length(p_frames, 1), 0);
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
        UPDATE {s}.families SET next_pos = next_pos + n_rec
            WHERE root = p_root AND epoch = p_epoch AND (n_rec = 0 OR next_pos = p_first);
        IF NOT FOUND THEN
            PERFORM 1 FROM {s}.families WHERE root = p_root AND epoch = p_epoch;
            RETURN CASE WHEN FOUND THEN 2 ELSE 1 END;
        END IF;
        IF n_rec > 0 THEN
            INSERT INTO {s}.records (root, pos, frame)
                SELECT p_root, p_first + u.i - 1, u.frame
                FROM unnest(p_frames) WITH ORDINALITY AS u(frame, i);
        END IF;
        IF n_items > 0 THEN
            INSERT INTO {s}.streams AS s (name, length, root)
                SELECT u.n, max(u.i) + 1, p_root FROM unnest(p_names, p_idx) AS u(n, i)
                GROUP BY u.n
                ON CONFLICT (name) DO UPDATE SET length = greatest(s.length, excluded.length);
            INSERT INTO {s}.stream_items (name, idx, frame)
                SELECT * FROM unnest(p_names, p_idx, p_items);
            IF EXISTS (SELECT 1 FROM {s}.tails WHERE root = p_root AND key <> p_key) THEN
                PERFORM pg_notify(p_chan, string_agg(DISTINCT 's' || n, ' '))
                    FROM unnest(p_names) AS n;
            END IF;
        END IF;
        RETURN 0;
    END
    $$;
    """,
]
# Python run after a migration, in its transaction: `fill(conn, quoted schema, world)`.
FILLS: dict[int, Callable[[Any, str, Any], None]] = {}
VERSION = len(MIGRATIONS)
# The store format (`local.FORMAT_VERSION`) a schema has from each schema version on.
STORE_FORMATS = {1: 1, 5: 2}


def store_format(schema_version: int) -> int:
    """The store format of a schema at `schema_version`."""
    return max(f for v, f in STORE_FORMATS.items() if v <= max(schema_version, 1))


# Set `due` and `hook_mark` from a head's `head_wake`; a delivery after the mark came already.
WAKE_UPDATE = """UPDATE {s}.families SET hook_mark = %(mark)s::bigint,
    due = CASE WHEN inbox_next <> %(mark)s::bigint THEN '-Infinity'::float8
        ELSE %(due)s::float8 END"""


def _fill_wake(conn: Any, s: str, world: Any) -> None:
    """Migration 3: every family's `due` and `hook_mark` from its head."""
    from ..._codec import decode
    from ..._family import head_wake

    for root, stored in conn.execute(f"SELECT root, head FROM {s}.heads").fetchall():
        try:
            head = decode(bytes(stored))
        except Exception:
            continue  # unreadable: left runnable, as it is (its head is rebuilt)
        due, mark = head_wake(head if isinstance(head, dict) else None)
        conn.execute(
            WAKE_UPDATE.format(s=s) + " WHERE root = %(root)s",
            {"due": due, "mark": mark, "root": root},
        )


FILLS[3] = _fill_wake


def _fill_store_format_2(conn: Any, s: str, world: Any) -> None:
    """Migration 5: the steps registered for store format 2 (`_migrations.run_steps`) over every
    family's records; a record one changed is stored again at its position and the run's
    result or error its head keeps with it."""
    from ..._codec import decode, encode
    from ..._journal import frame, parse
    from ..._migrations import run_steps, steps_for

    if not steps_for(2):
        return
    for (root,) in conn.execute(f"SELECT root FROM {s}.families ORDER BY root").fetchall():
        rows = conn.execute(
            f"SELECT pos, frame FROM {s}.records WHERE root = %s ORDER BY pos", [root]
        ).fetchall()
        records = [(pos, parse(bytes(data), 0, root).records[0][1]) for pos, data in rows]
        changed, family = run_steps(world, root, records, 2)  # type: ignore[arg-type]
        for pos, stored in changed:
            conn.execute(
                f"UPDATE {s}.records SET frame = %s WHERE root = %s AND pos = %s",
                [frame(dict(stored)), root, pos],
            )
        row = conn.execute(f"SELECT head FROM {s}.heads WHERE root = %s", [root]).fetchone()
        if not changed or row is None:
            continue
        head = decode(bytes(row[0]))
        for run_id, entry in (head.get("runs") or {}).items():
            run = family.runs.get(run_id)
            if run is not None and entry.get("status") == run.status:
                entry["result"] = run.result if run.status == "completed" else None
                entry["error"] = run.error
        conn.execute(f"UPDATE {s}.heads SET head = %s WHERE root = %s", [encode(head), root])


FILLS[5] = _fill_store_format_2


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


def migrate(conn: Any, schema: str, *, create: bool = True, world: Any = None) -> bool:
    """Bring `schema` to `VERSION` (creating it if `create`); False: it does not exist and
    `create` is False. Runs in one transaction under an advisory lock, so concurrent
    workers starting together apply each migration once. `world`: the world being opened
    (what a migration step reads streams through)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"eve-migrate:{schema}"])
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
        if exists is None and not create:
            return False
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".schema_version ('
            "version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute(f'SELECT max(version) FROM "{schema}".schema_version').fetchone()
        current = int(row[0]) if row and row[0] is not None else 0
        if current > VERSION:
            raise WorldError(
                f"PostgreSQL schema {schema!r} is at version {current}, newer than this eve "
                f"knows (up to {VERSION}): it was migrated by a newer eve; upgrade eve"
            )
        for version in range(current + 1, VERSION + 1):
            conn.execute(MIGRATIONS[version - 1].format(s=f'"{schema}"'))
            if version in FILLS:
                FILLS[version](conn, f'"{schema}"', world)
            conn.execute(f'INSERT INTO "{schema}".schema_version (version) VALUES (%s)', [version])
        conn.execute(IDENTITY.format(s=f'"{schema}"'))
    return True
