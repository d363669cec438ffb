"""How one commit of a leased family is made durable (`wal`): the records appended and the
items of its streams since the last, as one entry of its write-ahead file and one
`fdatasync`; then written into the journal and the stream files, unsynced, until a
checkpoint. *When* a family commits is the core's (`world._commit.CommitQueue`, and the
streams' batches: `StreamStore.drain`); this module only says how.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from ... import _faults, _journal
from ..._errors import StorageError
from ..._store import Order
from ..._world import stream_family
from .files import RunFiles, guard
from .stream_index import HEADER as STREAM_HEADER
from .streams import StreamStore
from .wal import CHECKPOINT_BYTES, NAME, Op, Wal, replay


class _Family:
    """A leased family's write-ahead file, its records not committed yet, and the streams
    its entries wrote since the last checkpoint."""

    def __init__(self, wal: Wal) -> None:
        self.wal = wal
        self.lock = threading.Lock()  # one commit of the family at a time
        self.written: list[bytes] = []  # records in the journal file, not committed yet
        self.held: list[bytes] = []  # records after them, written once committed
        self.held_size = 0
        self.touched: set[str] = set()
        self.journal = False  # the journal written since the last checkpoint


class FamilyCommits:
    """The write-ahead commits of the families a `LocalWorld` holds the lease of."""

    def __init__(
        self,
        writer_of: Callable[[str], _journal.Writer],
        streams: StreamStore,
        wrote: Callable[[str, int, int, bytes], None],
        before_durable: Callable[[], None],
    ) -> None:
        self._writer_of = writer_of
        self._streams = streams
        self._wrote = wrote
        self._before_durable = before_durable
        self._families: dict[str, _Family] = {}
        # Whether family `root` commits here (its streams' items go with its commits): asked
        # at each stream batch, append and commit (~12 a step), so the dict's own test.
        self.holds: Callable[[str], bool] = self._families.__contains__

    def open(self, root: str, folder: str) -> None:
        """Commit family `root` through its write-ahead file from now on (its lease was
        taken, and what the file held replayed)."""
        if root in self._families:
            return
        wal = Wal(folder)
        if wal.made:  # (families made by this eve have one from birth)
            _journal.fsync_dir(folder)
        self._families[root] = _Family(wal)

    def append(self, root: str, bodies: list[bytes], order: Order) -> list[int]:
        """Records for the family's next commit; their offsets in its journal. They are
        written into the journal at once (a kill then loses nothing written, as before
        write-ahead files), unless items of the family's streams wait for its commit and
        the records must not be seen before them (`Order.streams`): then they wait in the
        commit, written after it, which is made now unless a crash that lost them would
        only run their step again (`Order.unobserved`: they go with the next commit)."""
        family = self._families[root]
        writer = self._writer_of(root)
        if len(bodies) == 1:  # (a step's record)
            data = _journal.frame_body(bodies[0])
            frames = [data]
        else:
            frames = list(map(_journal.frame_body, bodies))
            data = b"".join(frames)
        # `EVE_FAULTS` counts appends, as a journal's durable writes: the Nth is committed
        # at once, with the fault in its entry's write (as a journal append's was).
        fault = _faults.next_write() if _faults.ACTIVE else None
        with family.lock:
            after = order.streams is not None and self._streams.holds(root)
            hold = fault is not None or bool(family.held) or after
            if hold:
                offset = writer.end + family.held_size
                family.held.append(data)
                family.held_size += len(data)
            else:
                offset = writer.write(data)
                self._wrote(writer.path, writer.ino, offset, data)
                family.written.append(data)
                family.journal = True
            if fault is not None or (after and not (order.unobserved or order.lazy)):
                self._commit(root, family, fault)
        positions = []
        for frame in frames:
            positions.append(offset)
            offset += len(frame)
        return positions

    def commit_many(self, roots: Iterable[str], wait: bool = True) -> None:
        for root in sorted(roots):
            self.commit(root, wait=wait)

    def commit(self, root: str, *, wait: bool = True) -> None:
        """Make everything of family `root` not committed yet durable, then readable.
        `wait=False`: not if another thread is committing it now."""
        family = self._families.get(root)
        if family is None:
            return
        if not family.lock.acquire(blocking=wait):
            return
        try:
            self._commit(root, family)
        finally:
            family.lock.release()

    def _commit(self, root: str, family: _Family, fault: str | None = None) -> None:
        taken = self._streams.take(root)
        if not taken and not family.written and not family.held:
            return
        writer = self._writer_of(root)
        ops: list[Op] = []
        for _, stream, _, data, at, _ in taken:
            if at == len(STREAM_HEADER):  # (the header with it: a cut may lose a new file)
                data, at = STREAM_HEADER + data, 0
            ops.append(("s", stream.file, at, data))
        written, held = b"".join(family.written), b"".join(family.held)
        if written or held:
            ops.append(("j", "", writer.end - len(written), written + held))
        family.written, family.held, family.held_size = [], [], 0
        try:
            if taken:
                self._before_durable()  # the family's record of its streams first
            family.wal.commit(ops, fault)
        except BaseException:
            self._streams.put(taken, stored=False)
            writer.cut(writer.end - len(written))  # nothing of a failed commit stays
            raise
        family.touched.update([t.name for t in taken])
        try:
            self._streams.put(taken, stored=True)  # items before the records that follow them
        finally:
            if held:
                family.journal = True
                offset = writer.write(held)
                self._wrote(writer.path, writer.ino, offset, held)
        if family.wal.bytes > CHECKPOINT_BYTES:
            self._checkpoint(root, family, give_back=False)

    def checkpoint(self, root: str, *, give_back: bool) -> None:
        """Commit, then make the journal and the stream files durable and empty the
        write-ahead file (`give_back`: its space too)."""
        family = self._families.get(root)
        if family is None:
            return
        with family.lock:
            self._commit(root, family)
            self._checkpoint(root, family, give_back=give_back)

    def _checkpoint(self, root: str, family: _Family, *, give_back: bool) -> None:
        if family.wal.bytes:
            if family.journal:
                self._writer_of(root).sync()
            self._streams.sync_streams(family.touched)
        family.touched.clear()
        family.journal = False
        family.wal.reset(give_back=give_back)

    def release(self, root: str) -> None:
        """The lease goes: checkpoint, then stop (the file is left empty)."""
        try:
            self.checkpoint(root, give_back=True)
        finally:
            family = self._families.pop(root, None)
            if family is not None:
                family.wal.close()

    def drop(self, root: str) -> None:
        """The family is being removed: what is not committed goes with it."""
        family = self._families.get(root)
        if family is not None:
            with family.lock:
                # Taken while the family is held here: only a held family's batches are its.
                self._streams.put(self._streams.take(root), stored=False)
                self._families.pop(root, None)  # (a second removal meanwhile took it)
                family.wal.close()

    def close(self) -> StorageError | None:
        """Release every family; the first failure is returned (every one is tried)."""
        failure: StorageError | None = None
        for root in list(self._families):
            try:
                self.release(root)
            except StorageError as exc:
                failure = failure or exc
        return failure


def empty_durably(folder: str) -> None:
    """Empty run folder `folder`'s write-ahead file for good (before its family's files are
    removed: a cut must not bring back entries that would make a removed stream again)."""
    path = os.path.join(folder, NAME)
    with contextlib.suppress(FileNotFoundError):
        if os.path.getsize(path) == 0:
            return
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, 0)
            os.fsync(fd)
        finally:
            os.close(fd)


class Recovery:
    """Before this process reads a family it does not hold the lease of: what its
    write-ahead file holds and its files do not (a cut, or a kill, after a commit) is
    written into them (`recover`), looked at again whenever the file changed (one `stat`).
    Read-only (`active` False): the files as they are."""

    def __init__(self, runs: RunFiles, streams: Path, leased: set[str], active: bool) -> None:
        self._runs, self._streams, self._leased = runs, str(streams), leased
        self._active = active
        self._seen: dict[str, tuple[int, int, int]] = {}  # root -> the file as last looked at

    def stream(self, name: str) -> None:
        root = stream_family(name)
        if root is not None:
            self.family(root)

    def family(self, root: str) -> None:
        if not self._active or root in self._leased:
            return
        folder = self._runs.of(root)[0]
        try:
            st = os.stat(os.path.join(folder, NAME))
        except (OSError, ValueError):
            return
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if not st.st_size or self._seen.get(root) == stamp:
            return
        if len(self._seen) >= 4096:
            self._seen.clear()
        self._seen[root] = stamp
        with guard(folder, "replaying the run's write-ahead file"):
            recover(folder, self._streams)


def recover(folder: str, streams: str) -> None:
    """Replay run folder `folder`'s write-ahead file if it holds anything and no one holds
    the family's lease (an owner's files hold every commit; a cut or a kill left it)."""
    try:
        if not os.path.getsize(os.path.join(folder, NAME)):
            return
        fd = os.open(os.path.join(folder, "owner.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        replay(folder, streams)
    except BlockingIOError:
        return
    finally:
        os.close(fd)  # (releases the flock)
