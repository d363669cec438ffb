"""What an owner writes: its lease, its records and stream items pending, and one family's
commit. When a family commits is the world core's decision (`world._commit.CommitQueue`): this
module only says what the commit is.

While it holds the lease the owner knows its family's journal end and stream lengths, so an
append gives out its position or index at once, without a round trip, and keeps the bytes in
the lease. A family's commit writes them in one transaction (`write_batch`: one statement,
fenced by the epoch, committed synchronously: a server crash loses no commit the owner went on
after). Items appended by a process without the family's lease (a session's first event, at
its creation) are written at once.
A commit is written only where the owner believes the family ends: its first record at the
journal's end, each stream's first item at the stream's stored length (else it is refused,
and the family's drive stops: a resume reloads it), so nothing is ever appended after a hole.
After a connection broke, and when a new connection finds another server (its start time or
system identifier changed: it restarted, or a standby took over), every owner reads its
journal end and stream lengths again before its next commit, and stops (its family reloaded)
if the database kept less than it had written. Records arrive as bodies and are stored as
they are, with their run, generation and kind beside them (`rows.record_row`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from ... import _faults, _offload
from ..._commit import CommitQueue
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
from .sql import _array, _ByteaArray, _int4_array, _int8_array, _TextArray

if TYPE_CHECKING:
    from .world import PostgresWorld


# A record to be written: its body, run, generation and kind (`rows.record_row`).
Row = tuple[bytes, str | None, int | None, str | None]
# A head to be written: its stored form, and what it says the family waits for (`head_wake`).
Head = tuple[bytes, float | None, int | None]


@dataclass(slots=True)
class _Batch:
    """An owner's pending records and stream items, taken from its lease to be written."""

    first: int  # the position of its first record
    records: list[Row]
    items: list[tuple[str, int, bytes]]  # (stream, index, item)
    head: Head | None  # the family's head, written after them

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
        # The lengths of the family's streams (read at acquire; no one else appends to them
        # while the lease is held), so an append gives out its index at once; the items not
        # written yet, in order.
        self.lengths: dict[str, int] = {}
        self.pending: list[tuple[str, int, bytes]] = []
        # The owner's records not written yet (their positions given out: they end at
        # `next_pos`), and the generation of each run of the family as far as it knows
        # (from the records it loaded and appended: a record's `gen` column).
        self.records: list[Row] = []
        self.head: Head | None = None  # the head to write after them
        self.gens: dict[str, int] = {}
        self.last_mark = 0  # the world's stream mark after this family's latest append
        self.committing = threading.Lock()  # held by the family's commit
        self.failure: BaseException | None = None  # a commit that could not be written
        # Owners of hook tokens claimed by or looked up for runs of the family: no one else
        # claims or releases them while the lease is held (a finished run's are released by
        # its own drive), so a turn's lookups need no round trip on the loop.
        self.hooks: dict[str, str] = {}
        # A connection broke or the server changed since the positions were last known to be
        # the database's: they are read again before the next commit (`_recheck`).
        self.recheck = False
        # A batch put back after a try that may have committed (`_put_back`): its next try
        # looks first whether it did.
        self.unsure = False

    def release(self) -> None:
        self.world._release(self)


class Owners(Connected):
    """What an owner writes: kept in its lease, written by its family's commit."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        super().__init__(url, create=create)
        # The families with something pending, and when they commit (on a thread when the
        # queue's timer commits: a commit is a round trip).
        self._commits = CommitQueue(self._commit_family, off_loop=True)

    def _write_fault(self) -> str | None:
        """`EVE_FAULTS` at a durable write (a create, an append, a delivery: the writes the
        local world counts): a crash before or during it commits nothing, so both die before
        the statement; a refused write raises as the disk's would."""
        if not _faults.ACTIVE:
            return None
        fault = _faults.next_write()
        if fault is not None:  # it is this write's: what this object appended before is written
            with contextlib.suppress(WorldError):
                self._commits.commit()
        if fault in ("crash_before_write", "crash_mid_write"):
            _faults.kill_self()
        if fault in ("enospc", "eio_write"):
            raise StorageError(f"{self.where}: write refused (injected {fault}); retry")
        return fault

    @staticmethod
    def _after_write(fault: str | None) -> None:
        if fault == "crash_after_fsync":
            _faults.kill_self()  # committed: the next process finds it

    def append(self, root: str, bodies: list[bytes], order: Order = RECORD) -> list[int]:
        # The records are given their positions now and written with the family's next
        # commit (the commit queue's: before the next observed effect, before anything a
        # reader could see): one transaction for a step's records and the items around them,
        # committed synchronously (a lazy record too).
        lease = self._held(root)
        rows = [(body, *record_row(root, body, lease.gens)) for body in bodies]
        if order.streams is not None and self._others_appended(lease, order.streams):
            self._commits.commit()  # their items before this record
        fault = self._write_fault()  # (what was appended before it is written first)
        with self._lock:
            first = lease.next_pos
            lease.records += rows
            lease.next_pos += len(rows)
        self._commits.pending(root)
        if fault is not None:
            self._commits.commit()
            self._failed(lease)
            self._after_write(fault)
        return list(range(first, first + len(rows)))

    def append_waits(self, root: str, order: Order) -> bool:
        # An owner's append only keeps the records for the family's next commit (made inline
        # by a caller on the loop: no thread hop), unless its order asks for other families'
        # items to be written first, or a fault is injected at it (which writes what came
        # before).
        lease = self._leases.get(root)
        if lease is None or lease.lost or _faults.ACTIVE:
            return True
        return order.streams is not None and self._others_appended(lease, order.streams)

    def _others_appended(self, lease: _PgLease, mark: int) -> bool:
        """Whether another family of this object has items appended from `mark` on pending
        (a record covering them is written after them: one family's go with its record)."""
        with self._lock:
            return any(
                other is not lease and other.last_mark > mark and other.pending
                and not other.lost
                for other in self._leases.values()
            )  # fmt: skip

    def before_effect(self, *, observed: bool = True) -> None:
        # Records and stream items are durable and readable before an observed effect; one
        # that no one observes (a model call) begins while they wait for the next effect to
        # commit them with its own, or `EFFECT_WAIT` (the commit queue's timer).
        loop = asyncio._get_running_loop()
        if observed or loop is None:
            self._commits.commit()
            self._failed()  # no effect follows a family whose records are not stored
        else:
            self._commits.commit_soon(loop)

    def _commit_family(self, root: str) -> bool:
        """The commit queue's commit of family `root`: what its lease holds pending (records,
        stream items, then its head), written in one transaction (`commit_family`). True
        once nothing of it is pending (or nothing is written for it any more: a lease
        released, lost or failed). A batch that could not be written is the family's
        failure, not the caller's (the queue commits every family): kept in the lease, it
        fails every later write of the lease and the next observed effect (`_failed`): the
        positions and indexes it gave out are gone, so the drive stops before any effect
        and a resume reloads the family."""
        lease = self._leases.get(root)
        if lease is None:
            return True
        # Inline on the loop, no other commit of the family is waited for (one on a thread
        # may be retrying a lost connection): it is made on a thread then.
        if not lease.committing.acquire(blocking=not _offload.inline()):
            raise _offload.WouldWait
        try:
            with self._lock:
                batch = self._take_batch(lease)
            if batch is not None:
                try:
                    self._send_batch(lease, batch)
                except _offload.WouldWait:
                    self._put_back(lease, batch)  # written by the call made again
                    raise
                except Exception as exc:
                    lease.failure = exc
        finally:
            lease.committing.release()
        with self._lock:
            return not (lease.records or lease.pending or lease.head)

    def _put_back(self, lease: _PgLease, batch: _Batch) -> None:
        """Return a taken batch to its lease, before what it took since (its try may have
        committed: the next looks first, `unsure`)."""
        with self._lock:
            lease.records = batch.records + lease.records
            lease.pending = batch.items + lease.pending
            lease.head = lease.head or batch.head
            lease.unsure = True

    def _failed(self, lease: _PgLease | None = None) -> None:
        """Raise the failure of `lease`'s commit (None: of any lease this object holds)."""
        with self._lock:
            leases = list(self._leases.values()) if lease is None else [lease]
        for held in leases:
            if held.failure is not None:
                raise held.failure

    def _take_batch(self, lease: _PgLease) -> _Batch | None:
        """What the lease has pending, taken from it (the caller holds `lease.committing` and
        the world's lock). A lost lease's are dropped, its failure set."""
        items, lease.pending = lease.pending, []
        records, lease.records = lease.records, []
        head, lease.head = lease.head, None
        if lease.failure is not None or not (items or records or head):
            return None
        if lease.lost:
            lease.failure = OwnershipError(self._lost_message(lease.root))
            return None
        return _Batch(lease.next_pos - len(records), records, items, head)

    def _send_batch(self, lease: _PgLease, batch: _Batch) -> None:
        """Write a taken batch (a retry looks first whether the try before committed)."""
        root, first = lease.root, batch.first
        arrays = dict(zip(("bodies", "runs", "gens", "kinds", "names", "idx", "items"),
                          batch.arrays(), strict=True))  # fmt: skip
        head, due, mark = batch.head or (None, None, None)
        params = {"root": root, "epoch": lease.epoch, "first": first, **arrays,
                  "chan": self._channel, "key": self._alive_key, "head": head, "due": due,
                  "mark": mark}  # fmt: skip
        bodies = [r[0] for r in batch.records]

        def go(conn: psycopg.Connection[Any], attempt: int) -> None:
            if attempt and self._batch_stored(conn, root, first, bodies, batch.items):
                return  # the first try committed; its answer was lost
            if lease.recheck:
                self._recheck(conn, lease, batch)
            try:
                row = conn.execute(self._sql["commit_family"], params).fetchone()
            except psycopg.errors.UniqueViolation:  # an index it gave out was taken
                raise StorageError(
                    f"run family {root}: a stream of it was appended to by a process without "
                    f"its lease in {self.where}; resume the session to reload it"
                ) from None
            code = int(row[0]) if row is not None else -1
            if code != 0:
                self._refused(conn, lease, "write to its journal and streams", first, code)

        self._call(go, again=True, first=1 if lease.unsure else 0)
        lease.unsure = False
        # The batch notified only if another world object tails the family: this one's own
        # tails are woken here.
        for name in {item[0] for item in batch.items}:
            self._signals.fire("s" + name)

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
        if not items:
            return False  # a head alone: written again (the same)
        name, idx, item = items[0]
        row = conn.execute(self._sql["stream_item"], {"name": name, "idx": idx}).fetchone()
        return row is not None and row[0] is not None and bytes(row[0]) == item

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
