"""Ordering without fsync schedules: an owner's records and stream items are batched. While it
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
if the database kept less than it had written. Records arrive as bodies and are stored as
they are, with their run, generation and kind beside them (`rows.record_row`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg_pool

from ... import _faults
from ..._errors import (
    OwnershipError,
    RunNotFoundError,
    StorageError,
    WorldError,
)
from ..._store import RECORD, Order
from ..._world import Lease
from .connection import Connected
from .rows import record_row
from .sql import (
    _LOOP_FORMATS,
    _LOOP_NAME,
    _LOOP_TYPES,
    _array,
    _ByteaArray,
    _int4_array,
    _int8_array,
    _TextArray,
)

if TYPE_CHECKING:
    from .threads import _Flusher
    from .world import PostgresWorld

LOOP_GETCONN = 0.002  # seconds the loop may wait for a connection the pool said was idle


# A record to be written: its body, run, generation and kind (`rows.record_row`).
Row = tuple[bytes, str | None, int | None, str | None]


@dataclass(slots=True)
class _Batch:
    """An owner's pending records and stream items, taken from its lease to be written."""

    first: int  # the position of its first record
    records: list[Row]
    items: list[tuple[str, int, bytes]]  # (stream, index, item)

    def arrays(self) -> list[bytes]:
        """The batch's arrays as `write_batch` takes them (binary): bodies, runs,
        generations, kinds, stream names, indexes, items."""
        records, items = self.records, self.items
        return [
            _array(_ByteaArray, [r[0] for r in records]),
            _array(_TextArray, [None if r[1] is None else r[1].encode() for r in records]),
            _int4_array([r[2] for r in records]),
            _array(_TextArray, [None if r[3] is None else r[3].encode() for r in records]),
            _array(_TextArray, [i[0].encode() for i in items]),
            _int8_array([i[1] for i in items]),
            _array(_ByteaArray, [i[2] for i in items]),
        ]


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
        # `next_pos`), and the generation of each run of the family as far as it knows
        # (from the records it loaded and appended: a record's `gen` column).
        self.records: list[Row] = []
        self.gens: dict[str, int] = {}
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


class Batching(Connected):
    """An owner's batches: kept in its lease, written before what must follow them."""

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
        lease = self._held(root)
        rows = [(body, *record_row(root, body, lease.gens)) for body in bodies]
        if order.streams is not None:
            self._flush_others(lease, order.streams)
        fault = self._write_fault()  # (what was appended before it is written first)
        with self._lock:
            first = lease.next_pos
            lease.records += rows
            lease.next_pos += len(rows)
            first_entry = lease.since is None
            if first_entry:
                lease.since = time.monotonic()
        if fault is not None:
            self._flush(lease)
            self._after_write(fault)
        elif first_entry:
            self._flusher_now().soon()
        return list(range(first, first + len(rows)))

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
            records, lease.records = lease.records, []
            first = lease.next_pos - len(records)
            lease.since = None
            lease.taken += 1
        if lease.failure is not None:
            raise lease.failure
        if not items and not records:
            return None
        return _Batch(first, records, items)

    def _send_batch(self, lease: _PgLease, batch: _Batch, retried: bool = False) -> None:
        """Write a taken batch (`retried`: a try of it may have committed: look first)."""
        root, first = lease.root, batch.first
        arrays = dict(zip(("bodies", "runs", "gens", "kinds", "names", "idx", "items"),
                          batch.arrays(), strict=True))  # fmt: skip
        params = {"root": root, "epoch": lease.epoch, "first": first, **arrays,
                  "chan": self._channel, "key": self._alive_key}  # fmt: skip
        bodies = [r[0] for r in batch.records]

        def go(conn: psycopg.Connection[Any], attempt: int) -> None:
            if (attempt or retried) and self._batch_stored(conn, root, first, bodies, batch.items):
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
        bodies: list[bytes],
        items: list[tuple[str, int, bytes]],
    ) -> bool:
        if bodies:
            return self._stored(conn, root, first, bodies)
        name, idx, item = items[0]
        row = conn.execute(self._sql["stream_item"], {"name": name, "idx": idx}).fetchone()
        return row is not None and row[0] is not None and bytes(row[0]) == item

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
        from .threads import _Flusher  # (it imports this module)

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
                  *batch.arrays(), self._channel.encode(), b"%d" % self._alive_key]  # fmt: skip
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
        self, conn: psycopg.Connection[Any], root: str, first: int, bodies: list[bytes]
    ) -> bool:
        rows = conn.execute(
            self._sql["load_range"], {"root": root, "start": first, "end": first + len(bodies)}
        ).fetchall()
        return [bytes(r[1]) for r in rows] == bodies

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
