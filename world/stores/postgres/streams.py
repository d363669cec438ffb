"""A `PostgresWorld`'s streams: appends (an owner's kept in its lease for its family's commit,
others' written at once), reads, digests, live tails and the listener that wakes them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import zlib
from collections.abc import AsyncIterator, Hashable, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg

from ... import _codec
from ..._errors import (
    CorruptJournalError,
    OwnershipError,
    StorageError,
    StoreUnavailableError,
    WorldError,
)
from ..._signals import wait_set
from ..._world import (
    DRIVING,
    LostItem,
    check_name,
    check_run_id,
    root_of,
)
from .listener import _Listener
from .owners import Owners, _PgLease

if TYPE_CHECKING:
    from .world import PostgresWorld

_DAMAGED = object()
# Seconds a live tail waits for a wake-up before it reads again anyway (a notification it
# cannot get: a batch that began before its registration, of a family created meanwhile).
TAIL_LOOK = 5.0
DIGESTS_KEPT = 4096  # streams whose last digest this object keeps (`stream_digest`)
PREFIXES_KEPT = 3  # digests of shorter prefixes kept with a stream's last


class Streams(Owners):
    """Stream calls and wake-ups (the layer below: `Owners`; above: `PostgresWorld`)."""

    @staticmethod
    def _decoded(pos: int, body: Any, what: str, *, record: bool = True) -> Any:
        """A stored body's value (a record: a map); one that does not decode is
        `CorruptJournalError` naming its position (nothing here is a torn tail)."""
        try:
            value = _codec.decode(bytes(body))
        except Exception:
            value = _DAMAGED
        if value is _DAMAGED or (record and not isinstance(value, dict)):
            raise CorruptJournalError(what, pos, what=f"damaged row at position {pos}")
        return value

    def _listening(self) -> None:
        """Start the listener (LISTEN, liveness lock) if needed and wait until it is up."""
        listener = self._listener
        if listener is None or not listener.is_alive():
            with self._lock:
                if self._listener is None or not self._listener.is_alive():
                    # (the listener serves the whole world: its leases, its inbox ends)
                    self._listener = _Listener(cast("PostgresWorld", self))
                    self._listener.start()
                listener = self._listener
        if not listener.ready.wait(self._target.retry):
            failure = StorageError(listener.failure or "no answer")
            raise StoreUnavailableError(self._unreachable(failure))

    def stream_append(self, name: str, item: Any) -> int:
        check_name(name, "stream name")
        self._writable()
        data = _codec.encode(item, "stream item")
        root = _stream_root(name)
        lease = self._leases.get(root) if root is not None else None
        if lease is None:
            return self._append_unowned(name, root, data)
        self._held(lease.root)
        with self._lock:  # the index is given out now; the item is written by a commit
            index = lease.lengths.get(name, 0)
            lease.lengths[name] = index + 1
            lease.pending.append((name, index, data))
            self._appends += 1
            lease.last_mark = self._appends
        self._commits.pending(lease.root)
        loop = asyncio._get_running_loop()
        if loop is None:
            self._commits.commit()  # not on a loop (a caller that goes on at once): now
            self._failed(lease)
        else:
            self._commits.commit_soon(loop)  # readable within `EFFECT_WAIT` at the latest
        return index

    def _append_unowned(self, name: str, root: str | None, data: bytes) -> int:
        """An append by a process not holding the family's lease (a session's first event,
        written at its creation): the database gives out the index, refusing it while another
        worker holds the lease (`OwnershipError`: its owner gives out the indexes)."""
        if root is not None:
            self._check_not_lost(root)
        params = {"name": name, "item": data, "root": root, "chan": self._channel,
                  "note": "s" + name}  # fmt: skip

        def go(conn: psycopg.Connection[Any], attempt: int) -> int | None:
            if attempt:  # the first try may have committed
                for idx, stored in conn.execute(self._sql["stream_last"], params).fetchall():
                    if stored is not None and bytes(stored) == data:
                        return int(idx)
            free = root is not None and (
                conn.execute(self._sql["family"], {"root": root}).fetchone() is not None
            )
            row = conn.execute(self._sql["stream_append_free" if free else "stream_append"],
                               params).fetchone()  # fmt: skip
            return None if row is None else int(row[0])

        with self._lock:
            self._appends += 1
        self._commits.commit()
        index = self._call(go)
        if index is None:
            raise OwnershipError(
                f"run family {root} is owned by another worker: only its owner appends to "
                f"stream {name} now"
            )
        return index

    def _check_not_lost(self, root: str) -> None:
        if root in self._lost:
            raise OwnershipError(self._lost_message(root))

    def _settled(self, name: str) -> _PgLease | None:
        """The lease of the family of stream `name` if this object holds it, what it has
        pending committed first (a read sees what this object appended)."""
        root = _stream_root(name)
        lease = self._leases.get(root) if root is not None else None
        if lease is not None:
            self._commits.commit()
            self._failed(lease)
        return lease

    def _own_waiting(self, name: str) -> tuple[int, list[bytes]] | None:
        """For the drive of the family of stream `name` (`DRIVING`), held here: the stream's
        stored length and its items that wait in the lease for the family's next commit (in
        index order), taken without committing them: a turn reads back what it appended as
        it starts (its history, the texts of its replies, a window's digest). None for any
        other reader, and while a batch of the family is being written (neither waiting nor
        stored yet), or the lease is lost or failed: it commits first, as before."""
        root = _stream_root(name)
        if root is None or root != DRIVING.get():
            return None
        lease = self._leases.get(root)
        if lease is None:
            return None
        with self._lock:  # (a commit takes its batch under this lock, holding `committing`)
            if lease.lost or lease.failure is not None or lease.committing.locked():
                return None
            waiting = [data for stream, _, data in lease.pending if stream == name]
            return lease.lengths.get(name, 0) - len(waiting), waiting

    def stream_read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        check_name(name, "stream name")
        if start < 0:
            start = max(self.stream_length(name) + start, 0)
        own = self._own_waiting(name)
        if own is None:
            self._settled(name)
            return self._stored_items(name, start, end)
        stored, waiting = own
        stop = stored + len(waiting) if end is None else min(end, stored + len(waiting))
        out = self._stored_items(name, start, min(stop, stored)) if start < stored else []
        what = f"{self.where}: stream {name}"
        for idx in range(max(start, stored), stop):
            out.append(self._decoded(idx, waiting[idx - stored], what, record=False))
        return out

    def _stored_items(self, name: str, start: int, end: int | None) -> list[Any]:
        """Items `start` to `end` of stream `name` as the database has them."""
        rows = self._all("stream_read", {"name": name, "start": start, "end": end})
        # An item `eve doctor --repair` replaced (NULL) reads as lost, and so does an item
        # missing (a hole an older eve left in a crash of the server): every item is read at
        # its index.
        out: list[Any] = []
        what = f"{self.where}: stream {name}"
        for idx, item in rows:
            out += [LostItem(missing) for missing in range(start + len(out), int(idx))]
            lost = item is None
            out.append(LostItem(int(idx)) if lost else self._decoded(idx, item, what, record=False))
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
        self._commits.commit()  # a token taken before what this object appended is written
        # would stand for less than it holds
        rows = self._all("stream_versions", {"names": list(names)}) if names else []
        found = {str(name): (int(length), str(xmin)) for name, length, xmin in rows}
        return [found.get(name) for name in names]

    def stream_digest(self, name: str, count: int, after: tuple[int, Any] | None = None) -> Any:
        # Only the items after the longest prefix known here are read: the one `after` names,
        # or this object's last digest of the stream while its row says no stored item was
        # changed or removed since (an append changes neither `made` nor `rewrites`). The row
        # and those items are one statement, read from where the kept digest ends; only when
        # the row says it is stale are the items read again from where they must start.
        check_name(name, "stream name")
        own = self._own_waiting(name)
        if own is None:
            self._settled(name)
        elif count > own[0]:  # over items waiting for the commit: continued over their bytes
            return self._digest_waiting(name, count, after, *own)
        return self._stored_digest(name, count, after)

    def _digest_waiting(
        self, name: str, count: int, after: tuple[int, Any] | None, stored: int,
        waiting: list[bytes],
    ) -> Any:  # fmt: skip
        """`stream_digest` of `count` items, the last of them among the `waiting` ones after
        the `stored`: what it is once they are written."""
        if count > stored + len(waiting):
            return None
        first = _digest_start(stored, count, after)
        if first == stored:  # the stored prefix's (a known longer one's is `after`'s)
            known = after if after is not None and after[0] <= stored else None
            digest = self._stored_digest(name, stored, known)
            if digest is None:
                return None
            crc = digest[1]
        else:
            crc = after[1][1] if after is not None else 0
        for data in waiting[first - stored : count - stored]:
            crc = zlib.crc32(data, crc)
        return count, crc

    def _stored_digest(self, name: str, count: int, after: tuple[int, Any] | None) -> Any:
        """`stream_digest` of `count` items the database has."""
        kept = self._digests.get(name)
        base, crc = _kept_base(kept, count)
        first = _digest_start(base, count, after)
        rows = self._all("stream_digest", {"name": name, "start": first, "end": count})
        if count > (int(rows[0][0]) if rows else 0):
            return None
        token = None if not rows else (str(rows[0][1]), int(rows[0][2]))
        if first == base > 0 and kept is not None and kept[0] != token:  # a stale digest's
            base, crc = 0, 0
            first = _digest_start(0, count, after)
            rows = [(None, None, None, idx, item) for idx, item in self._all(
                "stream_read", {"name": name, "start": first, "end": count})]  # fmt: skip
        if first != base and after is not None:  # from the digest `after` names
            crc = after[1][1]
        for *_, idx, item in rows:
            if idx is not None:
                crc = zlib.crc32(b"\xc1" if item is None else bytes(item), crc)  # (never msgpack)
        if token is not None:
            self._keep_digest(name, kept, (token, count, crc))
        return count, crc

    def _keep_digest(self, name: str, kept: Any, digest: tuple[Any, int, int]) -> None:
        """Keep `(token, count, crc)` as a digest of stream `name` (`kept`: what was kept
        before: the longest prefix's stays, and a few shorter ones with the same token: a
        view checks the prefix its checkpoint covers at every drive while the drives' ends
        move on)."""
        token, count, crc = digest
        keep = (token, count, crc, ())
        if kept is not None and kept[0] == token:
            pairs = [(count, crc), (kept[1], kept[2]), *kept[3]]
            longest = max(pairs)
            shorter = [p for p in dict(pairs).items() if p[0] != longest[0]]  # (latest first)
            keep = (token, *longest, tuple(shorter[:PREFIXES_KEPT]))
        with self._lock:
            self._digests.pop(name, None)  # (the newest last: the oldest goes first)
            self._digests[name] = keep
            if len(self._digests) > DIGESTS_KEPT:
                del self._digests[next(iter(self._digests))]

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
                        await wait_set(event, TAIL_LOOK)
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


def _kept_base(kept: Any, count: int) -> tuple[int, int]:
    """`(count, crc)` of the longest prefix up to `count` items whose digest is kept (`kept`:
    a stream's in `_digests`), `(0, 0)` if none is."""
    if kept is None:
        return 0, 0
    return max([(n, crc) for n, crc in [(kept[1], kept[2]), *kept[3]] if n <= count],
               default=(0, 0))  # fmt: skip


def _digest_start(first: int, count: int, after: tuple[int, Any] | None) -> int:
    """Where a digest of `count` items reads from: `first` (the end of a digest known here),
    or further on where `after` names a longer prefix's digest."""
    if (
        after is not None
        and isinstance(after[1], tuple)
        and after[1][0] == after[0]
        and first < after[0] <= count
    ):
        return after[0]
    return first


def _stream_root(name: str) -> str | None:
    """The family a stream belongs to: a stream `<kind>.<run id>[.<n>...]` is its run's."""
    parts = name.split(".")
    if len(parts) < 2:
        return None
    try:
        return root_of(check_run_id(parts[1]))
    except WorldError:
        return None
