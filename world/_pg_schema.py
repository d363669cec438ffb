"""The PostgreSQL world's schema: numbered migrations, applied under an advisory lock.

A schema (PostgreSQL namespace, `eve` by default) holds one world. `schema_version` lists
the migrations applied; a world refuses a schema whose newest version it does not know (it
was migrated by a newer eve), and a reader opening a world that was never created sees it
empty instead of creating it (an older one it migrates, as a writer would).
"""

from __future__ import annotations

import re
from typing import Any

from ._errors import WorldError

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
]
VERSION = len(MIGRATIONS)


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
    workers starting together apply each migration once."""
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
            conn.execute(f'INSERT INTO "{schema}".schema_version (version) VALUES (%s)', [version])
    return True
