"""The connections of a `PostgresWorld`: a pool, retried calls, the server run it talks to
(a restart or a failover makes every owner read its positions again), said once away and back."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import psycopg_pool
from psycopg.types.json import Jsonb

from ... import _offload
from ..._clock import local_now
from ..._errors import (
    StorageError,
    StoreUnavailableError,
    WorldError,
)
from ..._presence import Member
from ..._signals import Signals
from ..._store import Store
from . import schema as _pg_schema
from .sql import SQL as _SQL
from .sql import _configure, _reason, _server_of
from .urls import _target
from .urls import redact_url as redact

if TYPE_CHECKING:
    from .listener import _Listener
    from .owners import _PgLease

T = TypeVar("T")

# Seconds a call made inline on the loop waits for a free pooled connection (more: on a thread).
_INLINE_CONNECTION = 0.0005

# A member's advertisement (`Connected.advertise`), rows unheard of for a day removed with it.
_ADVERTISE = """
    WITH gone AS (DELETE FROM {s}.members WHERE seen < now() - interval '1 day')
    INSERT INTO {s}.members (id, facts) VALUES (%(id)s, %(facts)s)
    ON CONFLICT (id) DO UPDATE SET facts = excluded.facts, seen = now()
"""
_MEMBERS = """
    SELECT id, facts, extract(epoch FROM now() - seen)::float8 FROM {s}.members
    WHERE seen > now() - make_interval(secs => %s) ORDER BY seen DESC, id
"""


class Connected(Store):
    """A `PostgresWorld`'s state and connections (the layers above: `Owners`, `Streams`,
    `PostgresWorld`)."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        """Open (creating or migrating it unless `create` is False) the world at `url`,
        `postgresql://[user[:password]@]host[:port]/database[?schema=S&lease=SECONDS&pool=N&retry=SECONDS]`.

        Raises:
            StorageError: the database cannot be reached (one line: where, what to check).
            WorldError: the schema was written by a newer eve, or the URL is invalid.
        """
        self._target = _target(url)
        self.url = redact(url)
        s = f'"{self._target.schema}"'
        lease = self._target.lease
        self._sql = {name: text.format(s=s, lease=lease) for name, text in _SQL.items()}
        self._channel = f"eve_{self._target.schema}"[:63]
        self._me = secrets.token_hex(8)  # this world object, as a lease owner
        self._alive_key = secrets.randbits(62)  # its advisory lock while its listener runs
        self._signals = Signals()
        self._leases: dict[str, _PgLease] = {}
        # Families whose lease this object lost: nothing more is written for them from here
        # (their stream items included), until it acquires them again.
        self._lost: set[str] = set()
        self._appends = 0  # stream items appended through this object (`stream_mark`)
        # Inbox ends of leased families, known while the listener hears every delivery (its
        # notification forgets the family's); `_inbox_epoch` counts forgettings, so an end read
        # while one came is not kept. Spares a round trip per step (the engine asks each).
        self._inbox_ends: dict[str, int] = {}
        self._inbox_epoch = 0
        # Live tails of this object, by family (its row in `tails` while one is > 0), and the
        # lock their registrations take (in order with the counts).
        self._tails: dict[str, int] = {}
        self._tails_lock = threading.Lock()
        # The last digest taken of each stream, with what the stream's row said then (its
        # `made` and `rewrites`: the prefix it covers is unchanged while they are the same),
        # and those of a few shorter prefixes asked lately (`(count, crc)`, the latest first).
        self._digests: dict[str, tuple[tuple[str, int], int, int, tuple[tuple[int, int], ...]]]
        self._digests = {}
        self._lock = threading.Lock()
        self._away = False  # the database stopped answering (`_gone`), said once
        self._server = ""  # the server run last seen (`_server_of`)
        self._offset = 0.0  # the database's clock less this process's (`clock_offset`)
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._listener: _Listener | None = None
        self._exists = True  # while it migrates: a migration step reads streams through it
        try:
            with psycopg.connect(self._target.conninfo, autocommit=True, connect_timeout=5) as c:
                self._exists = _pg_schema.migrate(c, self._target.schema, create=create)
                self._server = _server_of(c)
                self._offset = clock_offset(c)
        except psycopg.Error as exc:
            raise StoreUnavailableError(self._unreachable(exc)) from None

    def __repr__(self) -> str:
        return f"PostgresWorld({self.url!r})"

    @property
    def where(self) -> str:
        """Where this world is, for messages: `postgresql://host:port/db (schema S)`."""
        return f"postgresql://{self._target.where} (schema {self._target.schema})"

    def store_id(self) -> str | None:
        """This store's id, made once with its schema (`world.store_identity`); None: no
        world here (opened for reading only)."""
        if not self._exists:
            return None
        return self._call(lambda conn, _: _pg_schema.store_id(conn, self._target.schema))

    # -- presence (`world.Presence`) ----------------------------------------------------------
    def advertise(self, member: str, facts: Mapping[str, object]) -> None:
        """Say that ``member`` uses this store, with ``facts``, now (its row in `members`);
        rows not seen for a day go at the same time."""
        self._writable()
        sql = _ADVERTISE.format(s=f'"{self._target.schema}"')
        params = {"id": member, "facts": Jsonb(dict(facts))}
        self._call(lambda conn, _: conn.execute(sql, params))

    def members(self, within: float) -> list[Member]:
        """The members that advertised in the last ``within`` seconds, most recent first."""
        if not self._exists:
            return []
        sql = _MEMBERS.format(s=f'"{self._target.schema}"')
        rows = self._call(lambda conn, _: conn.execute(sql, [within]).fetchall())
        return [Member(str(i), f if isinstance(f, dict) else {}, float(ago)) for i, f, ago in rows]

    def withdraw(self, member: str) -> None:
        """Forget ``member`` (it leaves)."""
        if self._exists:
            sql = f'DELETE FROM "{self._target.schema}".members WHERE id = %s'
            self._call(lambda conn, _: conn.execute(sql, [member]))

    def _unreachable(self, exc: BaseException) -> str:
        return (
            f"cannot use PostgreSQL at {self._target.where}: {_reason(exc)}; check that the "
            "server is running and reachable and that --world / EVE_WORLD names it "
            "(postgresql://user@host:port/database)"
        )

    # -- connections ---------------------------------------------------------------------------
    def _pool_now(self) -> psycopg_pool.ConnectionPool[Any]:
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = psycopg_pool.ConnectionPool(
                        self._target.conninfo,
                        min_size=1,
                        max_size=self._target.pool,
                        kwargs={"autocommit": True},
                        configure=self._configure,
                        open=False,
                        name="eve",
                        timeout=self._target.retry,
                    )
                    self._pool.open(wait=False)
                pool = self._pool
        return pool

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        _configure(conn)
        self._seen_server(_server_of(conn))
        self._offset = clock_offset(conn)  # at every (re)connect: a server may have moved

    def now(self) -> float:
        """The database's clock: this process's, corrected by the offset measured when a
        connection was made (`World.now`)."""
        return local_now() + self._offset

    def _seen_server(self, server: str) -> None:
        """A new connection talks to `server`: if that is another server run than before,
        every owner reads its positions again before it writes."""
        with self._lock:
            before, self._server = self._server, server
        if before and before != server:
            self._recheck_all()  # (said by nothing more: the away/back lines cover it)

    def _recheck_all(self) -> None:
        with self._lock:
            for lease in self._leases.values():
                lease.recheck = True

    def _call(
        self,
        fn: Callable[[psycopg.Connection[Any], int], T],
        *,
        again: bool = False,
        first: int = 0,
    ) -> T:
        """Run `fn(conn, attempt)` on a pooled connection, again on a fresh one while the
        connection breaks (for up to `?retry=` seconds, 30 by default: a database restarting).
        `attempt` > 0 tells a write to look first whether its previous try committed (it
        begins at `first`).

        Made inline on the loop (`_offload.inline()`), a call that is not one the caller can
        make `again` from its start (a read, a batch kept until it is written) raises
        `WouldWait` before trying, and one that can raises it instead of waiting to retry."""
        inline = _offload.inline()
        if inline and not again:
            raise _offload.WouldWait
        deadline = time.monotonic() + self._target.retry
        pause, attempt = 0.02, first
        # Inline, a connection is taken only if one is free: none is waited for on the loop.
        wait = _INLINE_CONNECTION if inline else None
        while True:
            try:
                with self._pool_now().connection(wait) as conn:
                    result = fn(conn, attempt)
                if self._away:
                    self._back()
                return result
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                if inline and isinstance(exc, psycopg_pool.PoolTimeout):
                    raise _offload.WouldWait from None  # nothing was sent
                self._recheck_all()  # (a write in flight may or may not have committed)
                if attempt:  # not only a connection the pool kept from before a restart
                    self._gone(exc)
                if inline:
                    raise _offload.WouldWait from None  # retried on a thread
                if time.monotonic() + pause >= deadline:
                    raise StoreUnavailableError(self._unreachable(exc)) from None
            except psycopg.Error as exc:
                raise StorageError(f"PostgreSQL at {self._target.where}: {_reason(exc)}") from None
            attempt += 1
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _gone(self, exc: BaseException) -> None:
        """The database stopped answering: said once (`notice`) until it answers again."""
        with self._lock:
            if self._away:
                return
            self._away = True
        if self.notice is not None:
            self.notice(
                f"PostgreSQL at {self._target.where} is unreachable ({_reason(exc)}); "
                f"retrying for up to {self._target.retry:g} s a call, nothing stored is lost"
            )

    def _back(self) -> None:
        with self._lock:
            if not self._away:
                return
            self._away = False
        if self.notice is not None:
            self.notice(f"PostgreSQL at {self._target.where} answers again")

    def _one(self, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """One row of a read-only statement (retried freely)."""
        if not self._exists:
            return None
        return self._call(
            lambda conn, _: conn.execute(self._sql[name], params).fetchone(), again=True
        )

    def _all(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if not self._exists:
            return []
        return self._call(
            lambda conn, _: conn.execute(self._sql[name], params).fetchall(), again=True
        )

    def _writable(self) -> None:
        if not self._exists:
            raise WorldError(f"{self.where}: no eve world here (opened for reading only)")


def clock_offset(conn: psycopg.Connection[Any], rounds: int = 3) -> float:
    """How far the database's clock is ahead of this process's (seconds; negative: behind):
    the median of `rounds` readings, each taken as the database's time less this process's
    at the middle of the round trip (so half the round trip is corrected for)."""
    offsets = []
    for _ in range(rounds):
        before = local_now()
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        after = local_now()
        if row is not None:
            offsets.append(float(row[0]) - (before + after) / 2)
    return sorted(offsets)[len(offsets) // 2] if offsets else 0.0
