"""`PostgresWorld`: the world in a PostgreSQL database, shared by any number of processes.

One schema (`eve` unless the URL says `?schema=NAME`) holds one world, created and migrated by
`_pg_schema`. Every durable call is one statement in its own transaction (autocommit), so a
call either happened whole or not at all; a call whose connection broke is retried on a fresh
connection, and a retried write first checks whether its first try committed (a create, an
append and a delivery carry what identifies them), so nothing is written twice.

Ordering without fsync schedules: an owner's records and stream items are batched. While it
holds the lease the owner knows its family's journal end and stream lengths, so an append
gives out its position or index at once, without a round trip (and, asked `append_waits`,
says it blocks on nothing: a caller on an event loop makes it inline), and keeps the bytes in
the lease. A batch is written in one transaction (`write_batch`: one statement, fenced by the
epoch, committed synchronously: a server crash loses no batch the owner went on after):
before an observed effect (`before_effect`), before anything a reader could see (a head, a
delivery, a hook, another family's batch) or anything that reads it, on the flusher thread
`EFFECT_WAIT` after an effect no one observes began (`before_effect(observed=False)`: a model
call runs while it commits; one that ends sooner leaves the batch to the next effect, which
writes it with what the call's end appended, in one commit), and by `BATCH_WAIT` after its
first entry at the latest (live tails).
Items appended by a process without the family's lease (a session's first event, at its
creation) are written at once.
A batch is written only where the owner believes the family ends: its first record at the
journal's end, each stream's first item at the stream's stored length (else it is refused,
and the family's drive stops: a resume reloads it), so nothing is ever appended after a hole.
After a connection broke, and when a new connection finds another server (its start time or
system identifier changed: it restarted, or a standby took over), every owner reads its
journal end and stream lengths again before its next batch, and stops (its family reloaded)
if the database kept less than it had written. Records arrive as bodies and are stored framed
(`_journal.frame_body`), as the other worlds store them.

Leases: the family row holds an epoch, the owner, and the lease's expiry. `acquire` takes a
free, expired or dead owner's lease and increments the epoch; every write of the owner (append,
head, stream items of its family) names the epoch it holds and is refused once another worker
took the lease (fencing: a worker that lost a lease can never write to that family again; the
world object remembers the families it lost, so nothing it writes without a lease reaches them
either, until it acquires them again).
An owner is alive while its listener connection holds its advisory lock (free the moment its
process dies; for a lease's time after the server started, every owner is taken for alive: a
restart freed every lock); a frozen one loses its leases when they expire (`?lease=SECONDS`,
10 s by default), renewed by the listener thread while it runs and as soon as it reconnects.

Wake-ups: deliveries and stream items `pg_notify` in their own transaction (an owner's batch
only while another world object tails one of the family's streams: `tails`, a row each
tailing object registers; its own tails the writer wakes itself); one listener connection
per world object turns them into wake-ups of the waiting coroutines (after a lost connection
every waiter is woken to look again; an idle tail also looks every `TAIL_LOOK`).

Connections: a `psycopg_pool` pool of at most `?pool=N` (8 by default), plus the listener's
one, however many families are driven or parked. A step's effect on the event loop borrows an
idle pooled connection to send its batch with the loop waiting for the socket
(`before_effect_on_loop`: no thread hop); with none idle it goes to a thread as any call.
The URL's password is never printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import struct
import threading
import time
import uuid
import weakref
import zlib
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg.adapt import Dumper
from psycopg.pq import Format

from . import _codec, _faults, _journal, _pg_schema
from ._errors import (
    CorruptJournalError,
    HookConflictError,
    OwnershipError,
    RunExistsError,
    RunNotFoundError,
    StorageError,
    WorldError,
)
from ._family import head_wake
from ._records import StoredRecord
from ._select import redact_url as redact
from ._signals import Signals
from ._world import (
    IO,
    RECORD,
    FamilyHead,
    FamilyLog,
    FamilyUsage,
    InboxItem,
    Lease,
    LostItem,
    Order,
    World,
    check_name,
    check_run_id,
    inbox_item,
    inbox_record,
    root_of,
)

if TYPE_CHECKING:
    from ._verify import Finding

T = TypeVar("T")

DEFAULT_SCHEMA = "eve"
DEFAULT_LEASE = 10.0  # seconds a lease lasts unrenewed (a frozen owner's sessions wait this)
DEFAULT_POOL = 8
RETRY_FOR = 30.0  # seconds a call retries a lost connection (a database restarting)
# Seconds an owner's batch waits, from its first entry, for the next effect or visible write
# to take it, before the flusher writes it (what a live tail may lag behind, and how long a
# record may be kept when nothing follows it).
BATCH_WAIT = 0.01
# Seconds after an effect no one observes began (a model call) before the flusher writes what
# was pending: a quick effect's caller takes the batch first, with what the effect's end
# appended, in one commit instead of two in a row (the next effect waits for both).
EFFECT_WAIT = 0.002
# Seconds a live tail waits for a wake-up before it reads again anyway (a notification it
# cannot get: a batch that began before its registration, of a family created meanwhile).
TAIL_LOOK = 5.0
LOOP_GETCONN = 0.002  # seconds the loop may wait for a connection the pool said was idle
DIGESTS_KEPT = 4096  # streams whose last digest this object keeps (`stream_digest`)
COMPACT_MIN = 16 * 1024  # consumed delivery bytes an inbox keeps before dropping them
_OWN_PARAMS = ("schema", "lease", "pool")


@dataclass(frozen=True)
class _Target:
    conninfo: str  # the URL as libpq takes it (eve's own parameters removed)
    schema: str
    lease: float
    pool: int
    where: str  # for messages: host:port/database, no credentials


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    try:
        lease = float(own.get("lease", DEFAULT_LEASE))
        pool = int(own.get("pool", DEFAULT_POOL))
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError as exc:
        raise WorldError(f"{redact(url)}: {exc}; use ?lease=SECONDS&pool=N") from None
    if lease <= 0 or pool < 1:
        raise WorldError(f"{redact(url)}: lease must be > 0 seconds and pool >= 1 connection")
    database = parts.path.lstrip("/") or parts.username or "postgres"
    return _Target(
        conninfo=urlunsplit(parts._replace(query=urlencode(rest))),
        schema=_pg_schema.check_schema(own.get("schema", DEFAULT_SCHEMA)),
        lease=lease,
        pool=pool,
        where=f"{host}:{port}/{database}",
    )


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


_ELEMENTS: dict[type[_Array], tuple[int, type[Dumper]]] = {
    _ByteaArray: (17, _ByteaArrayDumper),  # bytea
    _TextArray: (25, _TextArrayDumper),  # text
    _Int8Array: (20, _Int8ArrayDumper),  # bigint
}


def _array(kind: type[_Array], values: Sequence[bytes]) -> _Array:
    """`values` (each an element's binary form) as a `kind` array in binary form."""
    element = _ELEMENTS[kind][0]
    if not values:
        return kind(struct.pack("!iii", 0, 0, element))
    head = struct.pack("!iiiii", 1, 0, element, len(values), 1)
    return kind(head + b"".join([struct.pack("!i", len(v)) + v for v in values]))


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


@dataclass(slots=True)
class _Batch:
    """An owner's pending records and stream items, taken from its lease to be written."""

    first: int  # the position of its first record
    frames: list[bytes]
    items: list[tuple[str, int, bytes]]  # (stream, index, frame)


class _PgLease(Lease):
    def __init__(self, world: PostgresWorld, root: str, epoch: int, holder: str, nxt: int) -> None:
        self.world, self.root, self.epoch, self.holder = world, root, epoch, holder
        self.next_pos = nxt  # where this owner's next record goes
        self.lost = False
        # The owner's stream batch: the lengths of the family's streams (read at acquire; no
        # one else appends to them while the lease is held), so an append gives out its index
        # at once; the items not written yet, in order; the lock a write of them holds.
        self.lengths: dict[str, int] = {}
        self.pending: list[tuple[str, int, bytes]] = []
        # The owner's records not written yet (their positions given out: they end at
        # `next_pos`).
        self.records: list[bytes] = []
        self.last_mark = 0  # the world's stream mark after this family's latest append
        self.flushing = threading.Lock()
        self.since: float | None = None  # when the batch got its first entry (monotonic)
        self.taken = 0  # batches taken to be written
        self.failure: BaseException | None = None  # a batch that could not be written
        # Owners of hook tokens claimed by or looked up for runs of the family: no one else
        # claims or releases them while the lease is held (a finished run's are released by
        # its own drive), so a turn's lookups need no round trip on the loop.
        self.hooks: dict[str, str] = {}
        # A connection broke or the server changed since the positions were last known to be
        # the database's: they are read again before the next batch (`_recheck`).
        self.recheck = False

    def release(self) -> None:
        self.world._release(self)


class _Listener(threading.Thread):
    """The world's own connection: LISTEN for wake-ups, hold the liveness lock, renew leases."""

    def __init__(self, world: PostgresWorld) -> None:
        super().__init__(name="eve-pg-listener", daemon=True)
        self.world = world
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.failure = ""
        self._conn: psycopg.Connection[Any] | None = None

    def run(self) -> None:
        pause = 0.05
        while not self.stop.is_set():
            try:
                with psycopg.connect(
                    self.world._target.conninfo, autocommit=True, connect_timeout=5
                ) as conn:
                    self._conn = conn
                    self.world._seen_server(_server_of(conn))
                    conn.execute(f'LISTEN "{self.world._channel}"')
                    conn.execute("SELECT pg_advisory_lock(%s)", [self.world._alive_key])
                    self.failure, pause = "", 0.05
                    self.ready.set()
                    if self.world._away:
                        self.world._back()
                    self.world._forget_inbox_ends()
                    self.world._tails_again(conn)
                    self.world._signals.fire(None)  # whatever was missed while away
                    self._serve(conn)
            except psycopg.Error as exc:
                self.failure = _reason(exc)
                if not self.stop.is_set() and pause > 0.05:  # reconnecting failed too
                    self.world._gone(exc)
            finally:
                self.ready.clear()
                self._conn = None
                self.world._forget_inbox_ends()
            if not self.stop.is_set():
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _serve(self, conn: psycopg.Connection[Any]) -> None:
        world = self.world
        beat = min(world._target.lease / 3, 1.0)
        world._renew(conn)  # at once: after a lost connection, the leases ran on meanwhile
        renewed = time.monotonic()
        while not self.stop.is_set():
            for note in conn.notifies(timeout=beat):
                if self.stop.is_set():
                    return
                for key in note.payload.split(" "):  # a batch names all its streams
                    if key.startswith("i"):
                        world._forget_inbox_ends(key[1:])
                    world._signals.fire(key)
            if time.monotonic() - renewed >= world._target.lease / 3:
                world._renew(conn)
                renewed = time.monotonic()

    def halt(self, wake: Callable[[], None]) -> None:
        """Stop; `wake` sends it a notification so it sees that at once."""
        self.stop.set()
        if self.ready.is_set():
            with contextlib.suppress(Exception):
                wake()
        self.join(timeout=5)


class _Flusher(threading.Thread):
    """Writes owners' batches off the event loop, and without it (asking costs the loop no
    future, timer or wake-up): `EFFECT_WAIT` after an effect no one observes began (`early`),
    else once a batch's first entry is `BATCH_WAIT` old. While a batch is pending it sleeps
    until the first one is due; while leases are held and nothing is pending it looks every
    `BATCH_WAIT / 2` (so a first entry wakes no one); with no lease held it sleeps until a
    first entry wakes it (`soon`)."""

    def __init__(self, world: PostgresWorld) -> None:
        super().__init__(name="eve-pg-flusher", daemon=True)
        self.world = world
        self.cond = threading.Condition(threading.Lock())
        # lease: when its batch is to be written, and which batch (`taken`: one written by
        # someone else meanwhile is not the flusher's to write early)
        self.urgent: dict[_PgLease, tuple[float, int]] = {}
        self.until = math.inf  # when the flusher looks next (monotonic)
        self.idle = False
        self.stop = False

    def early(self, lease: _PgLease) -> None:
        due = time.monotonic() + EFFECT_WAIT
        with self.cond:
            asked = self.urgent.get(lease)
            if asked is None or asked[1] != lease.taken:  # (else the same batch, asked before)
                self.urgent[lease] = (due, lease.taken)
            self.idle = False
            if due < self.until:  # (else it looks by then anyway)
                self.cond.notify()

    def soon(self) -> None:
        """A batch got its first entry (its `since` is set before this is called)."""
        if self.idle:
            with self.cond:
                if self.idle:
                    self.idle = False
                    self.cond.notify()

    def run(self) -> None:
        world = self.world
        wait: float | None = BATCH_WAIT / 2
        while True:
            with self.cond:
                if wait is None and not self.idle:  # a first entry came meanwhile
                    wait = BATCH_WAIT / 2
                now = time.monotonic()
                if self.urgent:
                    first = min(due for due, _ in self.urgent.values()) - now
                    wait = first if wait is None else min(wait, first)
                if not self.stop and (wait is None or wait > 0):
                    self.until = math.inf if wait is None else now + wait
                    self.cond.wait(wait)
                    self.until = math.inf
                if self.stop:
                    return
                now = time.monotonic()
                due_now = [lease for lease, (due, _) in self.urgent.items() if due <= now]
                # (one whose batch was written meanwhile is not written early: a later waits)
                urgent = {lease for lease in due_now if self.urgent.pop(lease)[1] == lease.taken}
            with world._lock:
                leases = list(world._leases.values())
            for lease in leases:
                since = lease.since
                if lease in urgent or (since is not None and now - since >= BATCH_WAIT):
                    world._flush_quietly(lease)
            wait = self._next_look()

    def _next_look(self) -> float | None:
        """Seconds until the flusher looks again (None: once woken)."""
        with self.cond:
            self.idle = True  # unless a lease is held: looked at after this is set
        with self.world._lock:
            held = [lease for lease in self.world._leases.values() if not lease.lost]
        if not held:
            return None
        with self.cond:
            self.idle = False
        firsts = [since for lease in held if (since := lease.since) is not None]
        if not firsts:
            return BATCH_WAIT / 2
        return min(firsts) + BATCH_WAIT - time.monotonic()

    def halt(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify()
        self.join(timeout=5)


class PostgresWorld(World):
    """Durable storage in PostgreSQL; many processes may share one world."""

    io = IO.NETWORK  # every call is a round trip: see World.io
    shared = True  # any number of workers on any machines: see World.shared

    def __init__(self, url: str, *, create: bool = True) -> None:
        """Open (creating or migrating it unless `create` is False) the world at `url`,
        `postgresql://[user[:password]@]host[:port]/database[?schema=S&lease=SECONDS&pool=N]`.

        Raises:
            StorageError: the database cannot be reached (one line: where, what to check).
            WorldError: the schema was written by a newer eve, or the URL is invalid.
        """
        self._target = _target(url)
        self.url = redact(url)
        s = f'"{self._target.schema}"'
        lease = self._target.lease
        self._sql = {name: text.format(s=s, lease=lease) for name, text in _SQL.items()}
        self._loop_sql = _LOOP_BATCH.format(s=s).encode()
        # Pooled connections `_LOOP_NAME` is prepared on (`before_effect_on_loop`).
        self._prepared: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
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
        # `made` and `rewrites`: the prefix it covers is unchanged while they are the same).
        self._digests: dict[str, tuple[tuple[str, int], int, int]] = {}
        self._lock = threading.Lock()
        self._away = False  # the database stopped answering (`_gone`), said once
        self._server = ""  # the server run last seen (`_server_of`)
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._listener: _Listener | None = None
        self._flusher: _Flusher | None = None
        self._exists = True  # while it migrates: a migration step reads streams through it
        try:
            with psycopg.connect(self._target.conninfo, autocommit=True, connect_timeout=5) as c:
                self._exists = _pg_schema.migrate(
                    c, self._target.schema, create=create, world=self
                )
                self._server = _server_of(c)
        except psycopg.Error as exc:
            raise StorageError(self._unreachable(exc)) from None

    def __repr__(self) -> str:
        return f"PostgresWorld({self.url!r})"

    @property
    def where(self) -> str:
        """Where this world is, for messages: `postgresql://host:port/db (schema S)`."""
        return f"postgresql://{self._target.where} (schema {self._target.schema})"

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
                        timeout=RETRY_FOR,
                    )
                    self._pool.open(wait=False)
                pool = self._pool
        return pool

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        _configure(conn)
        self._seen_server(_server_of(conn))

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

    def _call(self, fn: Callable[[psycopg.Connection[Any], int], T]) -> T:
        """Run `fn(conn, attempt)` on a pooled connection, again on a fresh one while the
        connection breaks (for up to `RETRY_FOR` seconds: a database restarting). `attempt`
        > 0 tells a write to look first whether its previous try committed."""
        deadline = time.monotonic() + RETRY_FOR
        pause, attempt = 0.02, 0
        while True:
            try:
                with self._pool_now().connection() as conn:
                    result = fn(conn, attempt)
                if self._away:
                    self._back()
                return result
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                self._recheck_all()  # (a write in flight may or may not have committed)
                if attempt:  # not only a connection the pool kept from before a restart
                    self._gone(exc)
                if time.monotonic() + pause >= deadline:
                    raise StorageError(self._unreachable(exc)) from None
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
                f"retrying for up to {RETRY_FOR:.0f} s a call, nothing stored is lost"
            )

    def _back(self) -> None:
        with self._lock:
            if not self._away:
                return
            self._away = False
        if self.notice is not None:
            self.notice(f"PostgreSQL at {self._target.where} answers again")

    def _write_fault(self) -> str | None:
        """`EVE_FAULTS` at a durable write (a create, an append, a delivery: the writes the
        local world counts): a crash before or during it commits nothing, so both die before
        the statement; a refused write raises as the disk's would."""
        if not _faults.ACTIVE:
            return None
        fault = _faults.next_write()
        if fault is not None:  # it is this write's: what this object appended before is written
            with contextlib.suppress(WorldError):
                self._flush_all()
        if fault in ("crash_before_write", "crash_mid_write"):
            _faults.kill_self()
        if fault in ("enospc", "eio_write"):
            raise StorageError(f"{self.where}: write refused (injected {fault}); retry")
        return fault

    @staticmethod
    def _after_write(fault: str | None) -> None:
        if fault == "crash_after_fsync":
            _faults.kill_self()  # committed: the next process finds it

    def _one(self, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """One row of a read-only statement (retried freely)."""
        if not self._exists:
            return None
        return self._call(lambda conn, _: conn.execute(self._sql[name], params).fetchone())

    def _all(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if not self._exists:
            return []
        return self._call(lambda conn, _: conn.execute(self._sql[name], params).fetchall())

    def _writable(self) -> None:
        if not self._exists:
            raise WorldError(f"{self.where}: no eve world here (opened for reading only)")

    # -- families ----------------------------------------------------------------------------
    def create_family(self, root: str, bodies: list[bytes]) -> list[int]:
        frames = [_journal.frame_body(body) for body in bodies]
        check_run_id(root)
        self._writable()
        token = secrets.token_hex(8)
        params = {"root": root, "frames": frames, "next": len(frames) + 1, "token": token}
        self._settle()

        def go(conn: psycopg.Connection[Any], attempt: int) -> bool:
            row = conn.execute(self._sql["create"], params).fetchone()
            if row and row[0]:
                return True
            if attempt:  # the first try may have committed: then the family is ours
                mine = conn.execute(self._sql["created_by"], params).fetchone()
                return bool(mine and mine[0] == token)
            return False

        fault = self._write_fault()
        if not self._call(go):
            raise RunExistsError(f"run {root!r} already exists")
        self._after_write(fault)
        return list(range(1, len(frames) + 1))

    def fork_family(
        self,
        root: str,
        bodies: list[bytes],
        *,
        streams: Mapping[str, tuple[str, int]],
        hooks: Mapping[str, str],
    ) -> list[int]:
        # One statement: the family, its records, the stream copies (rows copied inside the
        # database, from one snapshot of the source) and the hooks commit together or not.
        frames = [_journal.frame_body(body) for body in bodies]
        check_run_id(root)
        for name in streams:
            check_name(name, "stream name")
        self._writable()
        for source, _ in streams.values():  # this object's items of them are copied too
            self._settled(source)
        self._settle()
        token = secrets.token_hex(8)
        names = list(streams)
        params = {
            "root": root, "frames": frames, "next": len(frames) + 1, "token": token,
            "names": names, "sources": [streams[n][0] for n in names],
            "counts": [streams[n][1] for n in names], "roots": [_stream_root(n) for n in names],
            "tokens": list(hooks), "runs": [hooks[t] for t in hooks],
        }  # fmt: skip

        def go(conn: psycopg.Connection[Any], attempt: int) -> bool:
            if attempt:  # the first try may have committed: then the family is ours
                mine = conn.execute(self._sql["created_by"], params).fetchone()
                if mine is not None:
                    return bool(mine[0] == token)
            try:
                row = conn.execute(self._sql["fork"], params).fetchone()
            except psycopg.errors.UniqueViolation:
                taken = [t for t in hooks if self._owner_on(conn, t) not in (None, hooks[t])]
                if taken:
                    message = f"hook token {taken[0]!r} is owned by another run"
                    raise HookConflictError(message) from None
                raise WorldError(f"{self.where}: a stream of the fork {root} exists already "
                                 "(a remnant: remove it first)") from None  # fmt: skip
            return bool(row and row[0])

        fault = self._write_fault()
        if not self._call(go):
            raise RunExistsError(f"run {root!r} already exists")
        self._after_write(fault)
        return list(range(1, len(frames) + 1))

    def _owner_on(self, conn: psycopg.Connection[Any], token: str) -> str | None:
        row = conn.execute(self._sql["hook_owner"], {"token": token}).fetchone()
        return None if row is None else str(row[0])

    def families(self) -> list[str]:
        return [row[0] for row in self._all("families", {})]

    def family_exists(self, root: str) -> bool:
        return self._one("family", {"root": root}) is not None

    def heads(self, *, inbox: bool = True, runnable: bool = False) -> list[FamilyHead]:
        # The marks cost nothing here; `runnable` reads only the families with work.
        rows = self._all("runnable_heads", {"now": time.time()}) if runnable else None
        return [
            FamilyHead(str(root), self._head(head), int(end))
            for root, head, end in (rows if rows is not None else self._all("heads", {}))
        ]

    def family_usage(self, root: str, *, streams: Sequence[str] | None = None) -> FamilyUsage:
        check_run_id(root)
        names = None if streams is None else list(streams)
        lease = self._leases.get(root)
        if lease is not None and not lease.lost:
            self._flush(lease)
        row = self._one("usage", {"root": root, "names": names})
        if row is None:
            return FamilyUsage(0, 0.0)
        # The last write known here: the head's (written at the end of every drive) or the
        # family's creation; a delivery since moves the inbox mark, which callers compare.
        return FamilyUsage(int(row[0] or 0), float(row[1] or 0.0))

    def stream_names(self) -> list[str]:
        return [str(row[0]) for row in self._all("stream_names", {})]

    def family_streams(self, root: str) -> list[str]:
        return [str(row[0]) for row in self._all("family_streams", {"root": root})]

    @property
    def schema_name(self) -> str:
        return f"schema {self._target.schema} of {self.where.split(' (')[0]}"

    @property
    def schema_sql(self) -> str:
        return f'"{self._target.schema}"'

    @property
    def exists(self) -> bool:
        return self._exists

    def verify(self) -> list[Finding]:
        from ._pg_verify import verify

        self._flush_all()
        return verify(self)

    def repair(self) -> list[Finding]:
        self._writable()
        self._flush_all()
        from ._pg_verify import repair

        return repair(self)

    def remnants(self) -> list[str]:
        return [str(row[0]) for row in self._all("remnants", {})]

    def remove_family(self, root: str, *, inbox_mark: int | None = None) -> bool:
        check_run_id(root)
        self._writable()
        lease = self._leases.get(root)
        params = {"root": root, "mark": inbox_mark,
                  "epoch": None if lease is None else lease.epoch}  # fmt: skip

        def go(conn: psycopg.Connection[Any], _: int) -> bool:
            # One transaction: the family row locked first, so a delivery (which updates it)
            # waits and then finds no family; a lost lease or a new delivery removes nothing.
            with conn.transaction():
                row = conn.execute(self._sql["remove_lock"], params).fetchone()
                if row is not None:
                    epoch, inbox_next = row
                    if lease is not None and epoch != lease.epoch:
                        self._lose(lease)
                        raise OwnershipError(self._lost_message(root))
                    if inbox_mark is not None and int(inbox_next) != inbox_mark:
                        return False
                conn.execute(self._sql["remove"], params)
            return True

        removed = self._call(go)
        if removed and lease is not None:
            lease.lost = True  # nothing is written for it any more; its release is a no-op
            with self._lock:
                lease.pending, lease.records = [], []
        return removed

    def load(self, root: str, start: int = 0) -> FamilyLog:
        lease = self._leases.get(root)
        if lease is not None and not lease.lost:
            self._flush(lease)  # what this owner appended is read back
        rows = self._all("load", {"root": root, "start": max(start, 1)}) if start > 0 else []
        if not rows or rows[0][0] != start:
            start = 0
            rows = self._all("load", {"root": root, "start": 1})
            if not rows and not self.family_exists(root):
                raise RunNotFoundError(f"no run family {root!r} in {self.where}")
        records = self._parse(rows, f"{self.where}: journal of run family {root}")
        return FamilyLog(records=cast("list[tuple[int, StoredRecord]]", records), start=start)

    @staticmethod
    def _parse(rows: list[tuple[Any, ...]], what: str) -> list[tuple[int, dict[str, Any]]]:
        """Each row's `(position, frame)` as `(position, record)`; a damaged frame is
        `CorruptJournalError` naming its position (nothing here is a torn tail)."""
        data = b"".join(bytes(row[1]) for row in rows)
        parsed = _journal.parse(data, 0, what) if data else _journal.ReadResult()
        if len(parsed.records) == len(rows):
            return [(row[0], rec) for row, (_, rec) in zip(rows, parsed.records, strict=True)]
        for row in rows:
            one = _journal.parse(bytes(row[1]), 0, what)
            if len(one.records) != 1:
                raise CorruptJournalError(what, row[0], what=f"damaged record at position {row[0]}")
        raise CorruptJournalError(what, 0, what="records do not parse one by one")

    def append(
        self,
        root: str,
        bodies: list[bytes],
        order: Order = RECORD,
    ) -> list[int]:
        # The records are given their positions now and written with the family's next batch:
        # before the next effect (`before_effect`), before anything a reader could see, and
        # by `BATCH_WAIT` at the latest (the flusher): one transaction for a step's records and
        # the items around them, committed synchronously (a lazy record too: see the module).
        frames = [_journal.frame_body(body) for body in bodies]
        lease = self._held(root)
        if order.streams is not None:
            self._flush_others(lease, order.streams)
        fault = self._write_fault()  # (what was appended before it is written first)
        with self._lock:
            first = lease.next_pos
            lease.records += frames
            lease.next_pos += len(frames)
            first_entry = lease.since is None
            if first_entry:
                lease.since = time.monotonic()
        if fault is not None:
            self._flush(lease)
            self._after_write(fault)
        elif first_entry:
            self._flusher_now().soon()
        return list(range(first, first + len(frames)))

    def append_waits(self, root: str, order: Order) -> bool:
        # An owner's append only keeps the records for the family's next batch (made inline
        # by a caller on the loop: no thread hop), unless its order asks for other families'
        # items to be written first, or a fault is injected at it (which writes what came
        # before).
        lease = self._leases.get(root)
        if lease is None or lease.lost or _faults.ACTIVE:
            return True
        if order.streams is None:
            return False
        with self._lock:
            return any(
                other is not lease and other.last_mark > order.streams and not other.lost
                for other in self._leases.values()
            )

    def _write_batch(self, lease: _PgLease) -> None:
        """Write the family's pending records and stream items in one transaction
        (`write_batch`); the caller holds `lease.flushing`. A batch that could not be written
        fails every later write of the lease: the positions and indexes it gave out are gone,
        so the drive stops and a resume reloads the family."""
        batch = self._take_batch(lease)
        if batch is not None:
            self._send_batch(lease, batch)

    def _take_batch(self, lease: _PgLease) -> _Batch | None:
        """What the lease has pending, taken from it (the caller holds `lease.flushing`)."""
        with self._lock:
            items, lease.pending = lease.pending, []
            frames, lease.records = lease.records, []
            first = lease.next_pos - len(frames)
            lease.since = None
            lease.taken += 1
        if lease.failure is not None:
            raise lease.failure
        if not items and not frames:
            return None
        return _Batch(first, frames, items)

    def _send_batch(self, lease: _PgLease, batch: _Batch, retried: bool = False) -> None:
        """Write a taken batch (`retried`: a try of it may have committed: look first)."""
        root, first, frames, items = lease.root, batch.first, batch.frames, batch.items
        params = {"root": root, "epoch": lease.epoch, "first": first,
                  "frames": _array(_ByteaArray, frames),
                  "names": _array(_TextArray, [i[0].encode() for i in items]),
                  "idx": _int8_array([i[1] for i in items]),
                  "items": _array(_ByteaArray, [i[2] for i in items]),
                  "lazy": False, "chan": self._channel,
                  "key": self._alive_key}  # fmt: skip

        def go(conn: psycopg.Connection[Any], attempt: int) -> None:
            if (attempt or retried) and self._batch_stored(conn, root, first, frames, items):
                return  # the first try committed; its answer was lost
            if lease.recheck:
                self._recheck(conn, lease, batch)
            try:
                row = conn.execute(self._sql["write_batch"], params).fetchone()
            except psycopg.errors.UniqueViolation:  # an index it gave out was taken
                raise StorageError(
                    f"run family {root}: a stream of it was appended to by a process without "
                    f"its lease in {self.where}; resume the session to reload it"
                ) from None
            code = int(row[0]) if row is not None else -1
            if code != 0:
                self._refused(conn, lease, "write to its journal and streams", first, code)

        try:
            self._call(go)
        except BaseException as exc:
            lease.failure = exc
            raise
        self._batch_written(batch)

    def _recheck(self, conn: psycopg.Connection[Any], lease: _PgLease, batch: _Batch) -> None:
        """Before `batch` is written after a broken connection or a server change: the
        family's journal end and stream lengths in the database must be where this owner
        wrote them up to, else it stops (nothing more is written; a resume reloads the
        family from what the database kept)."""
        row = self._still_held(conn, lease)
        stored = {
            str(name): int(length)
            for name, length in conn.execute(self._sql["family_lengths"], {"root": lease.root})
        }
        with self._lock:  # what it gave out, less what is not written yet
            expected = dict(lease.lengths)
            for name, _, _ in [*batch.items, *lease.pending]:
                expected[name] -= 1
        wrong = [
            f"stream {name} has {stored.get(name, 0)} items, this owner wrote {count}"
            for name, count in sorted(expected.items())
            if stored.get(name, 0) != count
        ]
        if int(row[1]) != batch.first:
            wrong.insert(0, f"its journal ends at {row[1]}, this owner wrote up to {batch.first}")
        if wrong:
            raise StorageError(
                f"run family {lease.root}: {self.where} kept less than this worker wrote ("
                f"{'; '.join(wrong[:3])}): it restarted from an older state; resume the session "
                "to reload it from what the database kept"
            )
        lease.recheck = False

    def _batch_written(self, batch: _Batch) -> None:
        # The batch notified only if another world object tails the family: this one's own
        # tails are woken here.
        for name in {item[0] for item in batch.items}:
            self._signals.fire("s" + name)

    def _batch_stored(
        self,
        conn: psycopg.Connection[Any],
        root: str,
        first: int,
        frames: list[bytes],
        items: list[tuple[str, int, bytes]],
    ) -> bool:
        if frames:
            return self._stored(conn, root, first, frames)
        name, idx, frame = items[0]
        row = conn.execute(self._sql["stream_item"], {"name": name, "idx": idx}).fetchone()
        return row is not None and bytes(row[0]) == frame

    def _flush(self, lease: _PgLease) -> None:
        """Write the family's pending records and stream items now, after the records other
        families of this object have pending (readers see nothing before a record before
        it); wait for a write of them in flight."""
        self._settle(lease)
        self._flush_one(lease)

    def _flush_one(self, lease: _PgLease) -> None:
        with lease.flushing:
            if lease.pending or lease.records:
                self._write_batch(lease)
            elif lease.failure is not None:
                raise lease.failure

    def _settle(self, but: _PgLease | None = None) -> None:
        """Write the records every family (but `but`) has pending, and wait for batches in
        flight: before anything a reader could see is stored. No thread holds two families'
        `flushing` locks at once (each is taken alone here)."""
        with self._lock:
            leases = [
                lease
                for lease in self._leases.values()
                if lease is not but
                and not lease.lost
                and (lease.records or lease.flushing.locked() or lease.failure is not None)
            ]
        for lease in leases:
            self._flush_one(lease)

    def _flush_others(self, lease: _PgLease, mark: int) -> None:
        """Before a record covering the items appended from `mark` on: those other families
        of this object appended are written first (one family's items go with its record)."""
        with self._lock:
            others = [
                other
                for other in self._leases.values()
                if other is not lease and other.last_mark > mark and not other.lost
            ]
        for other in others:
            if other.pending or other.records or other.flushing.locked():
                self._flush(other)

    def _flush_all(self) -> None:
        with self._lock:
            leases = [lease for lease in self._leases.values() if not lease.lost]
        for lease in leases:
            if lease.pending or lease.records or lease.flushing.locked() or lease.failure:
                self._flush_one(lease)

    def _flusher_now(self) -> _Flusher:
        flusher = self._flusher
        if flusher is None:
            with self._lock:
                if self._flusher is None:
                    self._flusher = _Flusher(self)
                    self._flusher.start()
                flusher = self._flusher
        return flusher

    def _flush_quietly(self, lease: _PgLease) -> None:
        # A failure is kept in the lease (`_write_batch`): the family's next write raises it.
        if not lease.lost:
            with contextlib.suppress(Exception):
                self._flush(lease)

    def before_effect(self, *, observed: bool = True) -> None:
        # Records and stream items must be durable and readable before an observed effect;
        # one that no one observes (a model call) begins while the flusher writes them (from
        # `EFFECT_WAIT` on: a quick one's next effect takes them first), and the family's next
        # write waits for that batch.
        if observed:
            self._flush_all()
            return
        with self._lock:
            leases = [lease for lease in self._leases.values() if lease.records and not lease.lost]
        for lease in leases:
            self._flusher_now().early(lease)

    async def before_effect_on_loop(self) -> bool:
        # One family's batch pending and nothing in flight (a session driven alone): sent on
        # an idle pooled connection, the loop waiting for its socket, so a step makes no thread
        # hop (~0.15 ms of a step's CPU). Anything else (several families, a batch in flight,
        # no idle connection, injected faults, a database away) takes `before_effect`. (The
        # exchange holds the lease's `flushing` while the loop waits: `close` comes once the
        # loop's tasks have ended, as eve's commands do.)
        if _faults.ACTIVE or self._away:
            return False
        with self._lock:
            busy = [
                lease
                for lease in self._leases.values()
                if not lease.lost
                and (lease.records or lease.pending or lease.failure is not None
                     or lease.flushing.locked())
            ]  # fmt: skip
        if not busy:
            return True
        lease = busy[0]
        if len(busy) > 1 or lease.failure is not None or lease.recheck:
            return False
        if not lease.flushing.acquire(blocking=False):
            return False
        try:
            conn = self._idle_connection()
            if conn is None:
                return False
            try:
                batch = self._take_batch(lease)
            except BaseException:
                self._put_back(conn, broken=False)
                raise
            if batch is None:
                self._put_back(conn, broken=False)
                return True
            await self._send_on_loop(lease, batch, conn)
            return True
        finally:
            lease.flushing.release()

    def _idle_connection(self) -> psycopg.Connection[Any] | None:
        """A pooled connection the pool has idle now (never waits for one), or None."""
        pool = self._pool_now()
        if not pool.get_stats().get("pool_available"):
            return None
        try:
            conn: psycopg.Connection[Any] = pool.getconn(timeout=LOOP_GETCONN)
        except (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed):
            return None
        return conn

    def _put_back(self, conn: psycopg.Connection[Any], *, broken: bool) -> None:
        pool = self._pool  # (None: the world closed meanwhile; no new pool for this)
        idle = conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if broken or not idle or pool is None:
            conn.close()  # (the pool opens another in its place)
        if pool is not None:
            with contextlib.suppress(psycopg_pool.PoolClosed):
                pool.putconn(conn)

    async def _send_on_loop(
        self, lease: _PgLease, batch: _Batch, conn: psycopg.Connection[Any]
    ) -> None:
        """Write a taken batch over `conn`, waiting on the loop; if the exchange fails, the
        batch is written off the loop as any other (looking first whether it committed). A
        cancellation waits for the answer first: the lease's positions must be known
        written or not before its `flushing` is released."""
        params = [lease.root.encode(), b"%d" % lease.epoch, b"%d" % batch.first,
                  _array(_ByteaArray, batch.frames),
                  _array(_TextArray, [i[0].encode() for i in batch.items]),
                  _int8_array([i[1] for i in batch.items]),
                  _array(_ByteaArray, [i[2] for i in batch.items]),
                  b"f", self._channel.encode(),
                  b"%d" % self._alive_key]  # fmt: skip
        pgconn, cancelled, code = conn.pgconn, False, None
        ready = conn in self._prepared
        if not ready:  # once a connection: the statement parsed and planned once
            done, cancelled = await _exchange_on_loop(
                pgconn,
                lambda: pgconn.send_prepare(_LOOP_NAME, self._loop_sql, _LOOP_TYPES),
                psycopg.pq.ExecStatus.COMMAND_OK,
            )
            ready = done is not None
            if ready:
                self._prepared.add(conn)
        if ready:
            answer, late = await _exchange_on_loop(
                pgconn,
                lambda: pgconn.send_query_prepared(_LOOP_NAME, params, _LOOP_FORMATS),
                psycopg.pq.ExecStatus.TUPLES_OK,
            )
            cancelled |= late
            value = answer.get_value(0, 0) if answer is not None and answer.ntuples else None
            code = int(value) if value is not None else None
        if code is None:  # (an error answer on a sound connection: its statement is looked at anew)
            self._prepared.discard(conn)
        self._put_back(conn, broken=pgconn.status != psycopg.pq.ConnStatus.OK)
        if code == 0:
            self._batch_written(batch)
        elif code is None:  # broken, or an error the thread's try reports as it would
            if pgconn.status != psycopg.pq.ConnStatus.OK:
                self._recheck_all()
            await _in_thread(self._send_batch, lease, batch, True)
        else:
            await _in_thread(self._refuse_batch, lease, batch, code)
        if cancelled:
            raise asyncio.CancelledError

    def _refuse_batch(self, lease: _PgLease, batch: _Batch, code: int) -> None:
        def go(conn: psycopg.Connection[Any], attempt: int) -> None:
            self._refused(conn, lease, "write to its journal and streams", batch.first, code)

        try:
            self._call(go)
        except BaseException as exc:
            lease.failure = exc
            raise

    def stream_mark(self) -> int:
        return self._appends

    def _held(self, root: str) -> _PgLease:
        lease = self._leases.get(root)
        if lease is None:
            raise OwnershipError(
                f"run family {root}: this worker does not hold its lease; acquire it first"
            )
        if lease.lost:
            raise OwnershipError(self._lost_message(root))
        if lease.failure is not None:
            raise lease.failure
        return lease

    def _lose(self, lease: _PgLease) -> None:
        lease.lost = True
        with self._lock:
            self._lost.add(lease.root)

    def _lost_message(self, root: str) -> str:
        return (
            f"run family {root}: this worker's lease was taken over by another worker "
            "(it was frozen or cut off past its lease); nothing more is written for it here"
        )

    def _stored(
        self, conn: psycopg.Connection[Any], root: str, first: int, frames: list[bytes]
    ) -> bool:
        rows = conn.execute(
            self._sql["load_range"], {"root": root, "start": first, "end": first + len(frames)}
        ).fetchall()
        return [bytes(r[1]) for r in rows] == frames

    def _still_held(self, conn: psycopg.Connection[Any], lease: _PgLease) -> tuple[Any, ...]:
        """The family's `(epoch, journal end)`, if `lease` still holds it (else it is lost)."""
        row = conn.execute(self._sql["lease_state"], {"root": lease.root}).fetchone()
        if row is None:
            raise RunNotFoundError(f"no run family {lease.root!r} in {self.where}")
        if row[0] != lease.epoch:
            self._lose(lease)
            raise OwnershipError(self._lost_message(lease.root))
        return tuple(row)

    def _refused(
        self,
        conn: psycopg.Connection[Any],
        lease: _PgLease,
        doing: str,
        expected: int | None = None,
        code: int = 2,
    ) -> None:
        """Raise why a fenced write of `lease`'s owner changed nothing (`expected`: where it
        put its first record; `code`: `write_batch`'s answer)."""
        row = self._still_held(conn, lease)
        if code == 3:
            raise StorageError(
                f"run family {lease.root}: could not {doing} in {self.where} (a stream of it "
                "does not end where this owner wrote up to: a process without its lease "
                "appended to it, or the database lost writes); resume the session to reload it"
            )
        raise StorageError(
            f"run family {lease.root}: could not {doing} in {self.where} (its journal ends at "
            f"{row[1]}, this owner expected {lease.next_pos if expected is None else expected})"
            "; resume the session to reload it"
        )

    def read_head(self, root: str) -> dict[str, Any] | None:
        row = self._one("read_head", {"root": root})
        return None if row is None else self._head(row[0])

    @staticmethod
    def _head(stored: Any) -> dict[str, Any] | None:
        if stored is None:
            return None
        try:
            head = _codec.decode(bytes(stored))
        except Exception:
            return None  # unreadable: rebuilt from the journal
        return head if isinstance(head, dict) else None

    def write_head(self, root: str, head: dict[str, Any]) -> None:
        data = _codec.encode(head, "head")
        due, mark = head_wake(head)
        lease = self._leases.get(root)
        if lease is not None:
            self._held(root)
            self._flush(lease)  # the items before the head are seen with it
            params = {"root": root, "head": data, "epoch": lease.epoch, "due": due, "mark": mark}

            def owned(conn: psycopg.Connection[Any], _: int) -> None:
                if conn.execute(self._sql["write_head"], params).rowcount != 1:
                    self._refused(conn, lease, "write its head")

            self._call(owned)
            return

        def unowned(conn: psycopg.Connection[Any], _: int) -> None:
            free = {"root": root, "head": data, "due": due, "mark": mark}
            if conn.execute(self._sql["write_head_free"], free).rowcount:
                return
            if conn.execute(self._sql["family"], {"root": root}).fetchone() is None:
                raise RunNotFoundError(f"no run family {root!r} in {self.where}")
            raise OwnershipError(f"run family {root!r} is owned by another worker")

        self._writable()
        self._check_not_lost(root)
        self._settle()
        self._call(unowned)

    # -- inbox -------------------------------------------------------------------------------
    def deliver(self, root: str, token: str, payload: Any) -> int:
        self._writable()
        frame = _journal.frame(inbox_record(token, payload, time.time()), "payload")
        params = {"root": root, "frame": frame, "key": uuid.uuid4(), "chan": self._channel,
                  "note": "i" + root}  # fmt: skip

        def go(conn: psycopg.Connection[Any], attempt: int) -> int | None:
            if attempt:
                row = conn.execute(self._sql["delivered"], params).fetchone()
                if row is not None:
                    return int(row[0])
            row = conn.execute(self._sql["deliver"], params).fetchone()
            return None if row is None else int(row[0])

        fault = self._write_fault()
        self._settle()  # (a reader may see the delivery: what this object appended first)
        try:
            item_id = self._call(go)
        finally:
            self._forget_inbox_ends(root)
        if item_id is None:
            raise RunNotFoundError(f"no run family {root!r} in {self.where}")
        self._after_write(fault)
        return item_id

    def read_inbox(self, root: str, start: int = 0) -> tuple[list[InboxItem], int]:
        start = max(start, 0)
        rows = self._all("read_inbox", {"root": root, "start": start})
        if not rows:
            raise RunNotFoundError(f"no run family {root!r} in {self.where}")
        end = int(rows[0][0])
        stored = [(row[1], row[2]) for row in rows if row[1] is not None]
        if not stored:
            return [], max(end, start)
        data = b"".join(bytes(frame) for _, frame in stored)
        parsed = _journal.parse(data, 0, f"{self.where}: inbox of run family {root}")
        if len(parsed.records) != len(stored):
            raise CorruptJournalError(f"{self.where}: inbox of run family {root}", start,
                                      what="a damaged delivery")  # fmt: skip
        items = [
            item
            for (item_id, _), (_, rec), crc in zip(stored, parsed.records, parsed.crcs, strict=True)
            if (item := inbox_item(int(item_id), rec, crc)) is not None
        ]
        return items, max(end, start)

    def compact_inbox(self, root: str, keep_from: int) -> bool:
        if not self._exists:
            return False
        return bool(
            self._call(
                lambda conn, _: (
                    conn.execute(
                        self._sql["compact_inbox"],
                        {"root": root, "keep": keep_from, "least": COMPACT_MIN},
                    ).rowcount
                )
            )
        )

    def inbox_end(self, root: str) -> int:
        known = self._inbox_ends.get(root)
        if known is not None:
            return known
        listener = self._listener
        epoch = self._inbox_epoch
        row = self._one("inbox_end", {"root": root})
        end = 0 if row is None else int(row[0])
        with self._lock:
            if (
                root in self._leases
                and listener is not None
                and listener.ready.is_set()
                and epoch == self._inbox_epoch
            ):
                self._inbox_ends[root] = end
        return end

    def known_inbox_end(self, root: str) -> int | None:
        return self._inbox_ends.get(root)

    def _forget_inbox_ends(self, root: str | None = None) -> None:
        """A delivery to `root` (None: to any family, perhaps unheard) came."""
        with self._lock:
            self._inbox_epoch += 1
            if root is None:
                self._inbox_ends.clear()
            else:
                self._inbox_ends.pop(root, None)

    def inbox_name(self, root: str) -> str:
        return f"inbox of run family {root} in {self.where}"

    # -- hooks -------------------------------------------------------------------------------
    def claim_hook(self, token: str, run_id: str) -> str:
        check_name(token, "hook token")
        self._writable()
        known = self._known_hook(token)
        if known is not None:
            return known
        params = {"token": token, "run": run_id, "root": root_of(run_id)}
        self._settle()

        def go(conn: psycopg.Connection[Any], _: int) -> str:
            row = conn.execute(self._sql["claim_hook"], params).fetchone()
            if row is None:  # taken by a claim that committed after this statement began
                row = conn.execute(self._sql["hook_owner"], params).fetchone()
            return str(row[0]) if row is not None else run_id

        return self._keep_hook(token, self._call(go))

    def hook_owner(self, token: str) -> str | None:
        check_name(token, "hook token")
        known = self._known_hook(token)
        if known is not None:
            return known
        row = self._one("hook_owner", {"token": token})
        return None if row is None else self._keep_hook(token, str(row[0]))

    def _known_hook(self, token: str) -> str | None:
        with self._lock:
            for lease in self._leases.values():
                if token in lease.hooks and not lease.lost:
                    return lease.hooks[token]
        return None

    def _keep_hook(self, token: str, owner: str) -> str:
        with self._lock:
            lease = self._leases.get(root_of(owner))
            if lease is not None and not lease.lost:
                lease.hooks[token] = owner
        return owner

    def release_hook(self, token: str, run_id: str) -> None:
        with self._lock:
            lease = self._leases.get(root_of(run_id))
            if lease is not None:
                lease.hooks.pop(token, None)
        if self._exists:
            self._settle()
            self._call(
                lambda conn, _: conn.execute(
                    self._sql["release_hook"], {"token": token, "run": run_id}
                )
            )

    # -- ownership and wake-ups --------------------------------------------------------------
    def _listening(self) -> None:
        """Start the listener (LISTEN, liveness lock) if needed and wait until it is up."""
        listener = self._listener
        if listener is None or not listener.is_alive():
            with self._lock:
                if self._listener is None or not self._listener.is_alive():
                    self._listener = _Listener(self)
                    self._listener.start()
                listener = self._listener
        if not listener.ready.wait(RETRY_FOR):
            raise StorageError(self._unreachable(StorageError(listener.failure or "no answer")))

    def acquire(self, root: str, wait: float | None = None) -> Lease:
        check_run_id(root)
        self._writable()
        self._listening()  # alive before owning: else another worker may take it as dead
        holder = secrets.token_hex(8)
        params = {"root": root, "me": self._me, "key": self._alive_key, "holder": holder,
                  "ttl": self._target.lease}  # fmt: skip
        deadline, pause = time.monotonic() + (wait or 0.0), 0.005
        while True:
            row = self._call(lambda conn, _: conn.execute(self._sql["acquire"], params).fetchone())
            if row is not None:
                lease = _PgLease(self, root, int(row[0]), holder, int(row[1]))
                # Read after the takeover committed (a statement of its own sees the last
                # writes of the previous owner, which the takeover waited for).
                rows = self._all("family_lengths", {"root": root})
                lease.lengths = {str(name): int(length) for name, length in rows}
                with self._lock:
                    self._leases[root] = lease
                    self._lost.discard(root)
                return lease
            if not self.family_exists(root):
                raise RunNotFoundError(f"no run family {root!r} in {self.where}")
            if time.monotonic() >= deadline:
                raise OwnershipError(
                    f"run family {root} is owned by another worker or process; wait until it "
                    "parks or finishes"
                )
            time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 2, 0.1)

    def _release(self, lease: _PgLease) -> None:
        try:
            if not lease.lost and lease.failure is None:
                self._flush(lease)  # while the lease fences them
        finally:
            with self._lock:
                if self._leases.get(lease.root) is lease:
                    del self._leases[lease.root]
            self._forget_inbox_ends(lease.root)
        if not lease.lost:
            params = {"root": lease.root, "epoch": lease.epoch}
            self._call(lambda conn, _: conn.execute(self._sql["release"], params))

    def _renew(self, conn: psycopg.Connection[Any]) -> None:
        """Extend every lease this world holds (on the listener's connection); mark lost
        the ones another worker took."""
        with self._lock:
            leases = [lease for lease in self._leases.values() if not lease.lost]
        if not leases:
            return
        params = {
            "roots": [lease.root for lease in leases],
            "epochs": [lease.epoch for lease in leases],
            "ttl": self._target.lease,
        }
        kept = {row[0] for row in conn.execute(self._sql["renew"], params).fetchall()}
        for lease in leases:
            if lease.root not in kept:
                self._lose(lease)

    async def wait_inbox(self, root: str, mark: int, timeout: float) -> bool:
        await asyncio.to_thread(self._listening)
        key, deadline = "i" + root, time.monotonic() + timeout
        while True:
            event = self._signals.event(key)
            try:
                if await asyncio.to_thread(self.inbox_end, root) != mark:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
            finally:
                self._signals.drop(key, event)

    # -- streams -----------------------------------------------------------------------------
    def stream_append(self, name: str, item: Any) -> int:
        check_name(name, "stream name")
        self._writable()
        frame = _journal.frame({"v": item}, "stream item")
        root = _stream_root(name)
        lease = self._leases.get(root) if root is not None else None
        if lease is None:
            return self._append_unowned(name, root, frame)
        self._held(lease.root)
        with self._lock:  # the index is given out now; the item is written in a batch
            index = lease.lengths.get(name, 0)
            lease.lengths[name] = index + 1
            lease.pending.append((name, index, frame))
            self._appends += 1
            lease.last_mark = self._appends
            first_entry = lease.since is None
            if first_entry:
                lease.since = time.monotonic()
        if asyncio._get_running_loop() is None:
            self._flush(lease)  # not on a loop (a caller that goes on at once): written now
        elif first_entry:
            self._flusher_now().soon()
        return index

    def _append_unowned(self, name: str, root: str | None, frame: bytes) -> int:
        """An append by a process not holding the family's lease (a session's first event,
        written at its creation): the database gives out the index."""
        if root is not None:
            self._check_not_lost(root)
        params = {"name": name, "frame": frame, "root": root, "chan": self._channel,
                  "note": "s" + name}  # fmt: skip

        def go(conn: psycopg.Connection[Any], attempt: int) -> int:
            if attempt:  # the first try may have committed
                for idx, stored in conn.execute(self._sql["stream_last"], params).fetchall():
                    if bytes(stored) == frame:
                        return int(idx)
            row = conn.execute(self._sql["stream_append"], params).fetchone()
            assert row is not None
            return int(row[0])

        with self._lock:
            self._appends += 1
        self._settle()
        return self._call(go)

    def _check_not_lost(self, root: str) -> None:
        if root in self._lost:
            raise OwnershipError(self._lost_message(root))

    def _settled(self, name: str) -> _PgLease | None:
        """The lease of the family of stream `name` if this object holds it, its batch
        written first (a read sees what this object appended)."""
        root = _stream_root(name)
        lease = self._leases.get(root) if root is not None else None
        if lease is not None and (lease.pending or lease.records or lease.flushing.locked()):
            self._flush(lease)
        return lease

    def stream_read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        check_name(name, "stream name")
        if start < 0:
            start = max(self.stream_length(name) + start, 0)
        self._settled(name)
        rows = self._all("stream_read", {"name": name, "start": start, "end": end})
        # A gap record `eve doctor --repair` left for a damaged item reads as lost, and so
        # does an item missing (a hole an older eve left in a crash of the server): every
        # item is read at its index.
        out: list[Any] = []
        for idx, rec in self._parse(rows, f"{self.where}: stream {name}"):
            out += [LostItem(missing) for missing in range(start + len(out), int(idx))]
            out.append(LostItem(int(idx)) if "v" not in rec else rec["v"])
        return out

    def stream_length(self, name: str) -> int:
        check_name(name, "stream name")
        root = _stream_root(name)
        lease = self._leases.get(root) if root is not None else None
        if lease is not None and not lease.lost:  # known while held: no round trip
            return lease.lengths.get(name, 0)
        row = self._one("stream_length", {"name": name})
        return 0 if row is None else int(row[0])

    def stream_versions(self, names: Sequence[str]) -> list[Hashable]:
        # The row's length and version (xmin): every append updates the row, and a stream
        # removed and made again is another row.
        self._flush_all()  # a token taken before this object's batches are written would
        # stand for less than they hold
        rows = self._all("stream_versions", {"names": list(names)}) if names else []
        found = {str(name): (int(length), str(xmin)) for name, length, xmin in rows}
        return [found.get(name) for name in names]

    def stream_digest(self, name: str, count: int, after: tuple[int, Any] | None = None) -> Any:
        # Only the items after the longest prefix known here are read: the one `after` names,
        # or this object's last digest of the stream while its row says no stored item was
        # changed or removed since (an append changes neither `made` nor `rewrites`).
        check_name(name, "stream name")
        self._settled(name)
        row = self._one("stream_made", {"name": name})
        if count > (0 if row is None else int(row[0])):
            return None
        first, crc = 0, 0
        token = None if row is None else (str(row[1]), int(row[2]))
        kept = self._digests.get(name)
        if kept is not None and kept[0] == token and kept[1] <= count:
            first, crc = kept[1], kept[2]
        if (
            after is not None
            and isinstance(after[1], tuple)
            and after[1][0] == after[0]
            and first < after[0] <= count
        ):
            first, crc = after[0], after[1][1]
        if first < count:
            rows = self._all("stream_read", {"name": name, "start": first, "end": count})
            for _, frame in rows:
                crc = zlib.crc32(bytes(frame), crc)
        if token is not None:
            keep = (token, count, crc)
            if kept is not None and kept[0] == token and kept[1] > count:
                keep = kept  # a longer prefix is known
            with self._lock:
                self._digests.pop(name, None)  # (the newest last: the oldest goes first)
                self._digests[name] = keep
                if len(self._digests) > DIGESTS_KEPT:
                    del self._digests[next(iter(self._digests))]
        return count, crc

    async def stream_tail(self, name: str, start: int = 0) -> AsyncIterator[tuple[int, Any]]:
        check_name(name, "stream name")
        await asyncio.to_thread(self._listening)
        root = _stream_root(name)
        if root is not None:  # before the first read: batches of it notify from here on
            await asyncio.to_thread(self._tail_on, root)
        try:
            if start < 0:
                start = max(await asyncio.to_thread(self.stream_length, name) + start, 0)
            key = "s" + name
            while True:
                event = self._signals.event(key)
                try:
                    items = await asyncio.to_thread(self.stream_read, name, start)
                    if not items:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(event.wait(), TAIL_LOOK)
                finally:
                    self._signals.drop(key, event)
                for item in items:
                    yield start, item
                    start += 1
        finally:
            if root is not None:  # (off the loop, without waiting: a generator closing)
                threading.Thread(target=self._tail_off, args=(root,), daemon=True).start()

    def _tail_on(self, root: str) -> None:
        """A tail of a stream of `root` begins here: another object's batches of it notify."""
        with self._tails_lock:
            if not self._tails.get(root):
                params = {"root": root, "key": self._alive_key}
                self._call(lambda conn, _: conn.execute(self._sql["tail_on"], params))
            self._tails[root] = self._tails.get(root, 0) + 1

    def _tails_again(self, conn: psycopg.Connection[Any]) -> None:
        """The listener is back (its liveness lock too): this object's tails register again
        (another's registration may have taken their rows for a dead object's meanwhile);
        every waiter is woken to look again after this."""
        with self._tails_lock:
            roots = list(self._tails)
        if roots:
            params = {"roots": roots, "key": self._alive_key}
            conn.execute(self._sql["tails_again"], params)

    def _tail_off(self, root: str) -> None:
        with self._tails_lock:
            left = self._tails.get(root, 0) - 1
            if left > 0:
                self._tails[root] = left
                return
            self._tails.pop(root, None)
            if self._pool is not None:  # (a row left by a closed object costs only notifies)
                params = {"root": root, "key": self._alive_key}
                with contextlib.suppress(WorldError):
                    self._call(lambda conn, _: conn.execute(self._sql["tail_off"], params))

    def close(self) -> None:
        with contextlib.suppress(WorldError):
            self._flush_all()
        with self._tails_lock:
            if self._tails and self._pool is not None:  # its tails end with it
                self._tails.clear()
                params = {"key": self._alive_key}
                with contextlib.suppress(WorldError):
                    self._call(lambda conn, _: conn.execute(self._sql["tails_off"], params))
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.halt()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.halt(self._wake_listener)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _wake_listener(self) -> None:
        params = {"chan": self._channel}
        self._call(lambda conn, _: conn.execute("SELECT pg_notify(%(chan)s, '')", params))


# `write_batch` as the loop sends it over libpq: the scalars as text, the arrays in binary.
_LOOP_BATCH = "SELECT {s}.write_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
_LOOP_NAME = b"eve_write_batch"  # (psycopg names its own `_pg3_<n>`)
_LOOP_TYPES = [25, 20, 20, 1001, 1009, 1016, 1001, 16, 25, 20]  # text, bigint, ..., bytea[], ...
_LOOP_FORMATS = [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]


async def _exchange_on_loop(
    pgconn: psycopg.pq.abc.PGconn, send: Callable[[], None], want: psycopg.pq.ExecStatus
) -> tuple[psycopg.pq.abc.PGresult | None, bool]:
    """Make one libpq exchange (`send` a statement, then read its answer) on a connection
    already in non-blocking mode, the loop waiting for its socket: the one result, None if
    the exchange failed or the answer is not `want` (the connection is then not to be used
    again). Also whether the caller was cancelled meanwhile: the answer is waited for all
    the same."""
    loop = asyncio.get_running_loop()
    cancelled, found, bad = False, None, False
    try:
        fd = pgconn.socket
        send()
        while pgconn.flush():  # (1: more to send once the socket takes it)
            cancelled |= await _ready(loop, fd, write=True)
        pgconn.consume_input()
        while pgconn.is_busy():
            cancelled |= await _ready(loop, fd, write=False)
            pgconn.consume_input()
        while (result := pgconn.get_result()) is not None:
            if result.status == want and found is None:
                found = result
            else:
                bad = True
    except (psycopg.Error, OSError, ValueError):
        bad = True
    return (None if bad else found), cancelled


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> bool:
    """Wait until `fd` can be written (or read); True if the waiter was cancelled meanwhile
    (it waits all the same: an exchange in flight is never left half done)."""
    done: asyncio.Future[None] = loop.create_future()
    (loop.add_writer if write else loop.add_reader)(fd, _settle_future, done)
    try:
        await done
        return False
    except asyncio.CancelledError:
        pass
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)
    await _ready(loop, fd, write=write)
    return True


def _settle_future(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


async def _in_thread(fn: Callable[..., None], *args: Any) -> None:
    """`fn(*args)` on a thread; a cancellation waits for it to end, then goes through."""
    call = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    cancelled = False
    while not call.done():
        try:
            await asyncio.wait({call})
        except asyncio.CancelledError:
            cancelled = True
    call.result()
    if cancelled:
        raise asyncio.CancelledError


def _stream_root(name: str) -> str | None:
    """The family a stream belongs to: a stream `<kind>.<run id>[.<n>...]` is its run's."""
    parts = name.split(".")
    if len(parts) < 2:
        return None
    try:
        return root_of(check_run_id(parts[1]))
    except WorldError:
        return None


# Statements, `{s}` the quoted schema. Each is one transaction (autocommit).
# An owner is alive while its liveness lock is held, and taken for alive for a lease's time
# after the server started (a restart frees every lock: its owners take theirs again as soon
# as they reconnect, and their batches in flight commit instead of their sessions being taken
# over, their tools run again).
_ALIVE = """(EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
    AND l.classid = (f.owner_key >> 32)::oid AND l.objid = (f.owner_key & 4294967295)::oid
    AND l.objsubid = 1)
    OR pg_postmaster_start_time() > now() - {lease} * interval '1 second')"""
_SQL: dict[str, str] = {
    "create": """
        WITH f AS (
            INSERT INTO {s}.families (root, next_pos, created_by)
            VALUES (%(root)s, %(next)s, %(token)s) ON CONFLICT (root) DO NOTHING RETURNING root
        ), r AS (
            INSERT INTO {s}.records (root, pos, frame)
            SELECT f.root, u.i, u.frame
            FROM f, unnest(%(frames)s::bytea[]) WITH ORDINALITY AS u(frame, i)
        )
        SELECT count(*) FROM f""",
    "fork": """
        WITH f AS (
            INSERT INTO {s}.families (root, next_pos, created_by)
            VALUES (%(root)s, %(next)s, %(token)s) ON CONFLICT (root) DO NOTHING RETURNING root
        ), r AS (
            INSERT INTO {s}.records (root, pos, frame)
            SELECT f.root, u.i, u.frame
            FROM f, unnest(%(frames)s::bytea[]) WITH ORDINALITY AS u(frame, i)
        ), st AS (
            INSERT INTO {s}.streams (name, length, root)
            SELECT u.name, u.n, u.root
            FROM f, unnest(%(names)s::text[], %(counts)s::bigint[], %(roots)s::text[])
                AS u(name, n, root)
        ), si AS (
            INSERT INTO {s}.stream_items (name, idx, frame)
            SELECT u.name, i.idx, i.frame
            FROM f, unnest(%(names)s::text[], %(sources)s::text[], %(counts)s::bigint[])
                AS u(name, source, n)
            JOIN {s}.stream_items i ON i.name = u.source AND i.idx < u.n
        ), h AS (
            INSERT INTO {s}.hooks (token, run_id, root)
            SELECT u.token, u.run, f.root
            FROM f, unnest(%(tokens)s::text[], %(runs)s::text[]) AS u(token, run)
        )
        SELECT count(*) FROM f""",
    "created_by": "SELECT created_by FROM {s}.families WHERE root = %(root)s",
    "families": 'SELECT root FROM {s}.families ORDER BY root COLLATE "C"',
    "family": "SELECT 1 FROM {s}.families WHERE root = %(root)s",
    "load": "SELECT pos, frame FROM {s}.records WHERE root = %(root)s AND pos >= %(start)s "
    "ORDER BY pos",
    "load_range": "SELECT pos, frame FROM {s}.records WHERE root = %(root)s "
    "AND pos >= %(start)s AND pos < %(end)s ORDER BY pos",
    "lease_state": "SELECT epoch, next_pos FROM {s}.families WHERE root = %(root)s",
    "read_head": "SELECT head FROM {s}.heads WHERE root = %(root)s",
    # With what the head says the family waits for (`head_wake`: the sweep's index).
    "write_head": f"""
        WITH f AS (
            {_pg_schema.WAKE_UPDATE} WHERE root = %(root)s AND epoch = %(epoch)s RETURNING root
        )
        INSERT INTO {{s}}.heads (root, head) SELECT root, %(head)s FROM f
        ON CONFLICT (root) DO UPDATE SET head = excluded.head, updated = now()""",
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
            INSERT INTO {s}.inbox (root, id, frame, key)
            SELECT %(root)s, f.id, %(frame)s, %(key)s FROM f RETURNING id
        )
        SELECT id, pg_notify(%(chan)s, %(note)s) FROM i""",
    "delivered": "SELECT id FROM {s}.inbox WHERE root = %(root)s AND key = %(key)s",
    "read_inbox": """
        SELECT f.inbox_next, i.id, i.frame FROM {s}.families f
        LEFT JOIN {s}.inbox i ON i.root = f.root AND i.id >= %(start)s
        WHERE f.root = %(root)s ORDER BY i.id""",
    # Like the local world's: only once the consumed deliveries take COMPACT_MIN bytes and no
    # fewer than the ones kept (a short inbox keeps every delivery, for anyone auditing it).
    "compact_inbox": """
        DELETE FROM {s}.inbox WHERE root = %(root)s AND id < %(keep)s AND (
            SELECT coalesce(sum(octet_length(frame)) FILTER (WHERE id < %(keep)s), 0)
                >= greatest(%(least)s, coalesce(sum(octet_length(frame))
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
            INSERT INTO {s}.streams (name, length, root) VALUES (%(name)s, 1, %(root)s)
            ON CONFLICT (name) DO UPDATE SET length = {s}.streams.length + 1
            RETURNING length - 1 AS idx
        ), i AS (
            INSERT INTO {s}.stream_items (name, idx, frame)
            SELECT %(name)s, s.idx, %(frame)s FROM s RETURNING idx
        )
        SELECT idx, pg_notify(%(chan)s, %(note)s) FROM i""",
    "write_batch": """
        SELECT {s}.write_batch(%(root)s, %(epoch)s, %(first)s, %(frames)b, %(names)b,
            %(idx)b, %(items)b, %(lazy)s, %(chan)s, %(key)s)""",
    "stream_item": "SELECT frame FROM {s}.stream_items WHERE name = %(name)s AND idx = %(idx)s",
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
    "stream_last": "SELECT idx, frame FROM {s}.stream_items WHERE name = %(name)s "
    "ORDER BY idx DESC LIMIT 8",
    "stream_read": "SELECT idx, frame FROM {s}.stream_items WHERE name = %(name)s "
    "AND idx >= %(start)s AND (%(end)s::bigint IS NULL OR idx < %(end)s) ORDER BY idx",
    "stream_length": "SELECT length FROM {s}.streams WHERE name = %(name)s",
    "stream_made": "SELECT length, made, rewrites FROM {s}.streams WHERE name = %(name)s",
    "heads": """
        SELECT f.root, h.head, f.inbox_next FROM {s}.families f
        LEFT JOIN {s}.heads h ON h.root = f.root ORDER BY f.root COLLATE "C"
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
    "usage": """
        WITH st AS (
            SELECT name FROM {s}.streams
            WHERE (%(names)s::text[] IS NULL AND root = %(root)s) OR name = ANY(%(names)s::text[])
        ), sizes AS (
            SELECT coalesce(sum(octet_length(frame)), 0) AS n FROM {s}.records
                WHERE root = %(root)s
            UNION ALL SELECT coalesce(sum(octet_length(frame)), 0) FROM {s}.inbox
                WHERE root = %(root)s
            UNION ALL SELECT coalesce(sum(octet_length(head)), 0) FROM {s}.heads
                WHERE root = %(root)s
            UNION ALL SELECT coalesce(sum(octet_length(i.frame)), 0)
                FROM {s}.stream_items i JOIN st ON st.name = i.name
        ), f AS (
            SELECT greatest(f.created, h.updated) AS at FROM {s}.families f
            LEFT JOIN {s}.heads h ON h.root = f.root WHERE f.root = %(root)s
        )
        SELECT (SELECT sum(n) FROM sizes), extract(epoch FROM (SELECT at FROM f))
        WHERE EXISTS (SELECT 1 FROM f) OR EXISTS (SELECT 1 FROM st)""",
    "remove_lock": "SELECT epoch, inbox_next FROM {s}.families WHERE root = %(root)s FOR UPDATE",
    "remove": """
        WITH h AS (DELETE FROM {s}.hooks WHERE root = %(root)s),
        t AS (DELETE FROM {s}.tails WHERE root = %(root)s),
        st AS (DELETE FROM {s}.streams WHERE root = %(root)s RETURNING name),
        si AS (DELETE FROM {s}.stream_items WHERE name IN (SELECT name FROM st)),
        i AS (DELETE FROM {s}.inbox WHERE root = %(root)s),
        hd AS (DELETE FROM {s}.heads WHERE root = %(root)s),
        r AS (DELETE FROM {s}.records WHERE root = %(root)s)
        DELETE FROM {s}.families WHERE root = %(root)s""",
}
