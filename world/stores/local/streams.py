"""Named append-only streams on disk: `streams/<name>.msgpack` plus a rebuildable `.idx`.

The data file is a journal (header, then one checksummed frame `{"v": item}` per item); the
index holds one offset per item, in either of the forms of `_stream_index`. Writers
append under an exclusive `flock` on the data file, so several processes may append; the
index is checked against the data on every append and rebuilt from the data (in the form it
has) when it is short or wrong. Appends are not fsync'd: `flush()` (called before each journal
append of the process) makes them durable.

Appends made on a thread running an event loop are written in batches: the first takes the
stream's `flock` and the items up to the loop's next turn are written with one write for the
data and one for the index (a step appends several items at once; each on its own cost five
system calls). The index of an item is fixed when it is appended, as the lock is held until
the batch is written. Every flush and close of the store writes the open batches first, and
so does a read of a stream with one open; a write that fails is raised by the store's next
append, read or flush. The owner may `hold` the batches for a moment: writing an item makes
the journal records before it durable first, and one written as the loop waits for a model's
first bytes cost a step a second `fdatasync`; held, it goes with the tool's effect, which
writes the batches and settles the records in one.

A store keeps the offsets it last read of each stream with the data file's inode and size:
while one `stat` shows both unchanged, reads use them as they are (a turn reads its streams a
few times; reading the whole index each time cost what the stream's length does); when the
file only grew, the offsets are completed from the new bytes alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sys
import threading
import time
import weakref
import zlib
from array import array
from collections.abc import AsyncIterator, Callable
from itertools import accumulate
from pathlib import Path
from typing import Any, NamedTuple

from ... import _journal
from ..._errors import CorruptJournalError, StorageError, storage_error
from ..._world import DRIVING, LostItem, check_name, stream_family
from . import stream_index as _stream_index
from .stream_index import (
    HEADER,
    KNOWN_MAX,
    NARROW,
    Known,
    KnownOffsets,
    encode_index,
    index_form,
    offsets_of,
    plausible,
)
from .wal import Patch, patched
from .watch import DirWatcher, touched

_Index = tuple["array[int]", int, int]  # a stream's item offsets, item count and data end


class _Writer:
    def __init__(self, data_fd: int, idx_fd: int, family: str | None) -> None:
        self.data_fd, self.idx_fd = data_fd, idx_fd
        self.family = family  # the stream's family by its name (`stream_family`)
        self.end = -1  # data size this process last saw (-1: not synced yet)
        self.count = 0
        self.ino = 0
        self.path = ""  # the data file
        self.file = ""  # its name in the streams folder
        self.watched = ""  # the data file as watchers name it
        self.batch: list[bytes] = []  # frames appended, not written yet (the flock is held)
        self.batch_at = 0  # where the batch begins in the data file
        self.batch_index = 0  # the index of its first item
        self.width = 4  # bytes an index entry (see `index_form`), as of the last sync
        self.seen: tuple[int, int, int, int] = (0, 0, 0, 0)  # `_identity` as its batch began


_Identity = tuple[int, int, int, int]
_Prefixes = tuple[tuple[int, int], ...]  # (stop, crc32 of a file's first `stop` bytes), ascending
_PREFIXES = 4  # kept a stream: the longest


def _longest(prefixes: _Prefixes, stop: int) -> tuple[int, int]:
    """The longest of ``prefixes`` within ``stop`` bytes; (0, 0) if none is."""
    start, crc = 0, 0
    for at, at_crc in prefixes:  # ascending
        if at <= stop:
            start, crc = at, at_crc
    return start, crc


def _identity(st: os.stat_result) -> _Identity:
    """What changes whenever a file's bytes do: inode, size, modification and change times."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


# The stream stores of this process: one about to wait for a flock writes their open batches
# first (each holds its stream's flock), so no one waits holding one (two stores on one folder
# in one thread, or two processes appending to the same two streams, would otherwise
# deadlock). Listed once when made, not at each batch: a step opens two.
_STORES: weakref.WeakSet[StreamStore] = weakref.WeakSet()


class Taken(NamedTuple):
    """An open batch taken for a family's commit (`StreamStore.take`)."""

    name: str
    writer: _Writer
    frames: list[bytes]
    data: bytes  # the frames joined: what goes in the data file
    at: int  # where its first frame goes in the data file
    first: int  # and that frame's index


class _Unsynced:
    """The data files appended to and not yet known durable, each with the number of its
    latest append. Journal appends of several families flush from several threads: each
    syncs what was pending when it began, and an fd appended to again meanwhile (a newer
    number than the one it synced) stays pending for the next flush."""

    def __init__(self) -> None:
        self._numbers: dict[int, int] = {}
        self._last = 0
        self._lock = threading.Lock()

    def mark(self, fd: int) -> None:
        with self._lock:
            self._last += 1
            self._numbers[fd] = self._last

    def pending(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._numbers.items())

    def synced(self, fd: int, number: int) -> None:
        """`fd` was made durable up to its append `number` (a later one keeps it pending)."""
        with self._lock:
            if self._numbers.get(fd) == number:
                del self._numbers[fd]

    def drop(self, fd: int) -> None:
        with self._lock:
            self._numbers.pop(fd, None)


def _write_index(writer: _Writer, offsets: array[int], index: int) -> None:
    """Write the index entries of items `index`... (at `offsets`)."""
    if writer.width == 8:
        _journal.write_all(writer.idx_fd, offsets.tobytes(), 8 * index)
    elif offsets[-1] < _stream_index.NARROW_LIMIT:
        entries = array("I", offsets).tobytes()
        if index == 0:
            _journal.write_all(writer.idx_fd, NARROW + entries, 0)
        elif (n := os.pwrite(writer.idx_fd, entries, len(NARROW) + 4 * index)) != len(entries):
            _journal.write_rest(writer.idx_fd, entries, len(NARROW) + 4 * index, n)
    else:  # past 4 GiB: the whole index in the 8-byte form, once
        stored = offsets_of(os.pread(writer.idx_fd, os.fstat(writer.idx_fd).st_size, 0))
        wide = array("Q", stored[:index]) + offsets
        os.ftruncate(writer.idx_fd, 0)
        _journal.write_all(writer.idx_fd, wide.tobytes(), 0)
        writer.width = 8


class _StreamReads:
    """The reading half of `StreamStore` (no lock, no writes): offsets checked against the
    data files, reads, digests and tails."""

    path: Path
    _folder: str
    _paths: dict[str, tuple[str, str]]
    _known: KnownOffsets
    _crcs: dict[str, tuple[_Identity, _Prefixes]]
    _batched: dict[str, _Writer]
    before_read: Callable[[str], None] | None
    # A reader's: the bytes (offset, bytes) a stream's data file (name, path) lacks that its
    # family's write-ahead file holds, read as if written (`wal.View`).
    overlay: Callable[[str, str], list[Patch] | None] | None

    def drain(self, keep: str | None = None) -> None:
        raise NotImplementedError

    def _raise_failure(self) -> None:
        raise NotImplementedError

    def _files(self, name: str) -> tuple[Path, Path]:
        data, idx = self._strings(name)
        return Path(data), Path(idx)

    def paths(self, name: str) -> tuple[str, str]:
        """The stream's data and index files."""
        return self._strings(name)

    def _strings(self, name: str) -> tuple[str, str]:
        paths = self._paths.get(name)
        if paths is None:
            stem = check_name(name, "stream name").replace(":", "%3A")
            base = os.path.join(self._folder, stem)
            if len(self._paths) >= KNOWN_MAX:
                self._paths.clear()
            paths = self._paths[name] = (base + ".msgpack", base + ".idx")
        return paths

    # -- reading (no lock, no writes) ------------------------------------------------------------
    def _index(self, name: str) -> tuple[array[int], int, int]:
        """Offsets of the stored items (use the first `count`), `count` and the data's end:
        the index checked and completed from the data. Only an open batch of `name` itself
        is written first (with every other: `drain`): a read of another stream does not
        commit a family's batch it does not read (a turn reads its own streams a few times
        while the step's items wait for the step's commit)."""
        if name in self._batched:
            self.drain()
        return self._file_index(name)

    def _file_index(self, name: str) -> _Index:
        """`_index` of the data file as it is (an open batch of `name` not written first)."""
        self._raise_failure()
        if self.before_read is not None:
            self.before_read(name)
        data_path, idx_path = self._strings(name)
        overlaid = self._patched(name, data_path)
        if overlaid is not None:  # not kept: the next read looks at the files again
            result = _journal.parse(overlaid, 0, data_path)
            offsets = array("Q", [pos for pos, _ in result.records[1:]])
            return offsets, len(offsets), result.end
        try:
            st = os.stat(data_path)
        except FileNotFoundError:
            return array("Q"), 0, 0
        known = self._known.get(name)
        if known is not None and known.ino == st.st_ino and known.size <= st.st_size:
            if known.size == st.st_size and known.mtime in (st.st_mtime_ns, -1):
                return known.offsets, known.items, known.end
            # Grown (or cut at its last valid item and grown again since: the items known are
            # still there): only the bytes from the last one on are read.
            offsets = read = known.offsets[: known.items]
            stored = -1  # not read from the index file
        else:
            try:
                with open(idx_path, "rb") as f:
                    offsets = read = offsets_of(f.read())
            except FileNotFoundError:
                offsets = read = array("Q")
            stored = len(read)
        offsets, end = self._complete(data_path, offsets, st.st_size)
        # The index file as read is the stream's whole index: a writer opening it later in
        # this process need not read and check it again (`_sync`).
        whole = offsets is read and len(offsets) == stored > 0 and end == st.st_size
        self._known.put(
            name,
            Known(st.st_ino, st.st_size, offsets, len(offsets), end, st.st_mtime_ns, whole),
        )
        return offsets, len(offsets), end

    def _patched(self, name: str, data_path: str) -> bytes | None:
        """The data file's bytes with what its family's write-ahead file adds (a reader's,
        `overlay`); None: the file as it is."""
        patches = self.overlay(name, data_path) if self.overlay is not None else None
        if not patches:
            return None
        try:
            with open(data_path, "rb") as f:
                return patched(f.read(), patches)
        except FileNotFoundError:
            return patched(b"", patches)

    def _complete(self, path: str, offsets: array[int], size: int) -> tuple[array[int], int]:
        """The offsets of every item of the data file `path` (`size` bytes) and where its
        last complete item ends: the entries of the index `offsets` that check out, completed
        from the data. An index is a cache a power cut may leave zero-filled, short or stale:
        only its longest prefix that can be one (see `plausible`) whose last entry starts a
        valid frame is believed; the rest is read from the data."""
        offsets = plausible(offsets, size)
        start = offsets[-1] if offsets else 0
        try:
            result = _journal.read_file(path, start)
        except CorruptJournalError:
            if not offsets:
                raise
            offsets, start = array("Q"), 0
            result = _journal.read_file(path, 0)
        records = result.records
        if start == 0:
            records = records[1:]  # the header
        elif not records or records[0][0] != start:
            return self._complete(path, array("Q"), size)
        else:
            records = records[1:]  # the item the last index entry already names
        offsets.extend(pos for pos, _ in records)
        return offsets, result.end

    def length(self, name: str) -> int:
        return self._index(name)[1]

    def read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        if start < 0:
            start = max(self.length(name) + start, 0)
        return self.read_spans(name, [(start, sys.maxsize if end is None else end)])[0]

    def read_spans(
        self, name: str, spans: list[tuple[int, int]], *, retry: bool = True
    ) -> list[list[Any]]:
        """``read`` of each ``(start, end)`` of ``spans`` (ascending): one read of the bytes
        they lie in, and only their items decoded (a reader picking a few items out of many)."""
        return self._read_spans(self._index(name), name, spans, retry=retry)

    def _read_spans(
        self, index: _Index, name: str, spans: list[tuple[int, int]], *, retry: bool
    ) -> list[list[Any]]:
        offsets, n, data_end = index
        cut = [(max(start, 0), max(min(end, n), 0)) for start, end in spans]
        cut = [(start, max(start, stop)) for start, stop in cut]
        wanted = [(start, stop) for start, stop in cut if start < stop]
        if not wanted:
            return [[] for _ in spans]
        first = offsets[wanted[0][0]]
        last = offsets[wanted[-1][1]] if wanted[-1][1] < n else data_end
        data_path, _ = self._strings(name)
        whole = self._patched(name, data_path) if self.overlay is not None else None
        if whole is not None:
            data = whole[first:last]
        else:
            with open(data_path, "rb") as f:
                f.seek(first)
                data = f.read(last - first)
        out: list[list[Any]] = []
        for start, stop in cut:
            if start >= stop:
                out.append([])
                continue
            low = offsets[start] - first
            high = (offsets[stop] if stop < n else data_end) - first
            parsed = _journal.parse(data[low:high], first + low, data_path)
            # Each item where its entry says (an index entry is believed once checked).
            if [pos for pos, _ in parsed.records] != offsets[start:stop].tolist():
                if retry:
                    self._forget(name)
                    return self.read_spans(name, spans, retry=False)
                raise CorruptJournalError(
                    data_path, offsets[start], what=f"items {start}..{stop - 1} unreadable"
                )
            # An item a repair replaced reads as lost; the others as they are.
            records = parsed.records
            out.append([LostItem(p) if r.get("t") == "gap" else r.get("v") for p, r in records])
        return out

    def _forget(self, name: str) -> None:
        """Know `name`'s offsets from its data file alone (its index file held a wrong entry
        that looked right: the writer's next append rewrites it)."""
        data_path, _ = self._strings(name)
        st = os.stat(data_path)
        offsets, end = self._complete(data_path, array("Q"), st.st_size)
        self._known.put(
            name, Known(st.st_ino, st.st_size, offsets, len(offsets), end, st.st_mtime_ns)
        )

    def digest(
        self, name: str, count: int, after: tuple[int, Any] | None = None
    ) -> tuple[int, int] | None:
        """(bytes, crc32) of the data file up to the end of item `count` (None: fewer items);
        given `after`, a digest just checked for fewer items, only the bytes after them are
        read (the crc continues from theirs)."""
        return self._digest(self._index(name), name, count, after)

    def _digest(
        self, index: _Index, name: str, count: int, after: tuple[int, Any] | None
    ) -> tuple[int, int] | None:
        offsets, n, data_end = index
        if count > n:
            return None
        stop = offsets[count] if count < n else data_end
        if stop == 0:
            return 0, 0
        data_path, _ = self._strings(name)
        whole = self._patched(name, data_path) if self.overlay is not None else None
        if whole is not None:
            return stop, zlib.crc32(whole[:stop])
        try:
            now = _identity(os.stat(data_path))
        except FileNotFoundError:
            return None
        kept = self._crcs.get(name)
        prefixes = kept[1] if kept is not None and kept[0] == now else ()
        start, crc = _longest(prefixes, stop)  # the file is as this store last saw it
        if after is not None and 0 <= after[0] <= count and isinstance(after[1], tuple):
            known = offsets[after[0]] if after[0] < n else data_end
            if after[1][0] == known and known > start:  # continue from the checked prefix
                start, crc = known, after[1][1]
        with open(data_path, "rb") as f:
            f.seek(start)
            data = f.read(stop - start)
        if len(data) != stop - start:
            return None  # shorter than its index says: read it all again next time
        crc = zlib.crc32(data, crc)
        if not any(at == stop for at, _ in prefixes):
            self._crcs[name] = (now, tuple(sorted((*prefixes, (stop, crc))))[-_PREFIXES:])
        return stop, crc

    async def tail(self, name: str, start: int = 0) -> AsyncIterator[tuple[int, Any]]:
        if start < 0:
            start = max(self.length(name) + start, 0)
        data_path, _ = self._files(name)
        self.path.mkdir(parents=True, exist_ok=True)
        with DirWatcher(self.path, [data_path.name]) as watcher:
            # Watching began before the first read: no append can fall in between.
            while True:
                items = self.read(name, start)
                for item in items:
                    yield start, item
                    start += 1
                if not items:
                    await watcher.wait()


class StreamStore(_StreamReads):
    """Every stream under one directory.

    Its parts, each with its own invariants: the writers and their open batches (under
    `_lock`, see `_Writer`), the offsets checked of each stream (`KnownOffsets`), the data
    files not yet durable (`_Unsynced`), and the digests' checked prefixes (`_crcs`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._folder = os.fspath(path)  # joined with each new name: a str, not a Path
        self._writers: dict[str, _Writer] = {}
        self._unsynced = _Unsynced()
        self.appends = 0  # items appended by this store (see World.stream_mark)
        self._touched: dict[int, int] = {}  # data fd -> `appends` at its latest append
        # name -> (the data file's identity, its latest prefixes checked: (stop, crc32 of the
        # first `stop` bytes)): a digest continues from one while the file is as it was then,
        # or as this store's own writes left it (`_write` moves the identity on), so a prefix
        # is read once, not per digest. Several, because readers check different prefixes in
        # turn (a session's view its kept count, the turn's checkpoint a later one): with one,
        # each would read the stream from its start again.
        self._crcs: dict[str, tuple[_Identity, _Prefixes]] = {}
        # Called before any item is written (the owner's journal records it may derive from
        # must be durable first, see LocalWorld.settle).
        self.before_write: Callable[[], None] | None = None
        # Told of every write of frames: (data file, its inode, offset, bytes).
        self.after_write: Callable[[str, int, int, bytes], None] | None = None
        # Told a stream's name before this store opens it for appends (its file may be made
        # then), and called before any stream data is made durable (LocalWorld's records of
        # each family's streams, `_stream_record`).
        self.before_open: Callable[[str], None] | None = None
        self.before_durable: Callable[[], None] | None = None
        # Whether a family's write-ahead file takes its streams' items (else they are written
        # and synced here), and what commits those families' open batches (LocalWorld, `wal`).
        self.held: Callable[[str], bool] | None = None
        self.before_read: Callable[[str], None] | None = None  # told a stream about to be read
        self.overlay: Callable[[str, str], list[Patch] | None] | None = None
        self.commit_families: Callable[[set[str], bool], None] | None = None
        self._known = KnownOffsets()
        self._paths: dict[str, tuple[str, str]] = {}
        self._resolved = str(path.resolve())  # as watchers name the folder
        self._lock = threading.RLock()  # writers and batches (flush runs on I/O threads)
        self._batched: dict[str, _Writer] = {}
        self._taken: dict[str, int] = {}  # batches `take` gave that `put` has not written
        self._drain_loop: asyncio.AbstractEventLoop | None = None  # a drain is due on it
        # The loop a `_drain_when_due` is queued on, not run yet: a drain due again before it
        # runs needs no other (it finds that one due), so a step's batches queue one.
        self._drain_queued: asyncio.AbstractEventLoop | None = None
        self._drain_due = 0.0  # `hold`: not before then (time.monotonic)
        self._drain_timer: asyncio.AbstractEventLoop | None = None  # `_drain_later` due on it
        self._failure: StorageError | None = None
        self._created: set[int] = set()  # data files this store created, entry not yet durable
        self._fd_paths: dict[int, str] = {}  # data fd -> its file (for error messages)
        _STORES.add(self)

    # -- writing ---------------------------------------------------------------------------------
    def append(self, name: str, frame: bytes) -> int:
        # Several a step: the usual path (a batch open on the loop) makes no call of its own.
        with self._lock:
            if self._failure is not None:
                self._raise_failure()
            writer = self._writers.get(name) or self._writer(name)
            loop = asyncio._get_running_loop()  # None off a loop (no exception raised)
            if not writer.batch and name in self._taken:
                self._continue(name, writer)  # its last batch is being committed: after it
            elif not writer.batch:
                # A leased family's items wait in a batch for its next commit, on a loop or
                # not (the step's record: `Order.streams`); others off a loop are written now.
                routed = self._route(writer) is not None
                writer = self._begin(name, writer, batch=loop is not None or routed)
                if loop is None and not routed:
                    try:
                        index = self._write(name, writer, [frame], frame)
                    except OSError as exc:
                        writer.end = -1  # resync (and drop any partial frame) before the next
                        where = self._fd_paths.get(writer.data_fd, name)
                        raise storage_error(where, f"appending to stream {name!r}", exc) from None
                    finally:
                        fcntl.flock(writer.data_fd, fcntl.LOCK_UN)
                    self.appends += 1
                    self._touched[writer.data_fd] = self.appends
                    return index
            if loop is not None and self._drain_loop is not loop:
                self._drain_loop = loop
                if self._drain_queued is not loop:
                    self._drain_queued = loop
                    loop.call_soon(self._drain_when_due, loop)
            index = writer.count  # added to the open batch, written by `drain`
            writer.batch.append(frame)
            writer.end += len(frame)
            writer.count = index + 1
            self.appends += 1
            self._touched[writer.data_fd] = self.appends
            return index

    def _begin(self, name: str, writer: _Writer, *, batch: bool) -> _Writer:
        """Take the stream's flock and bring the writer up to date with the files; with
        ``batch``, open a batch that keeps the lock until it is written. Returns the writer
        to use: a new one when the file was removed since (`eve gc`; it may exist anew)."""
        self._lock_file(writer)
        try:
            st = os.fstat(writer.data_fd)
            if st.st_nlink == 0:  # removed: appending to it would store nothing anyone reads
                fcntl.flock(writer.data_fd, fcntl.LOCK_UN)
                self._closed(writer)
                del self._writers[name]
                return self._begin(name, self._writer(name), batch=batch)
            if st.st_size != writer.end:
                self._sync(name, writer)
                st = os.fstat(writer.data_fd)
            writer.ino = st.st_ino
            writer.seen = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)  # `_identity`
        except BaseException as exc:
            fcntl.flock(writer.data_fd, fcntl.LOCK_UN)
            writer.end = -1
            if isinstance(exc, OSError):
                where = self._fd_paths.get(writer.data_fd, name)
                raise storage_error(where, f"appending to stream {name!r}", exc) from None
            raise
        if batch:
            writer.batch_at, writer.batch_index = writer.end, writer.count
            self._batched[name] = writer
        return writer

    def _lock_file(self, writer: _Writer) -> None:
        try:
            fcntl.flock(writer.data_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Wait holding no flock of an open batch (this store's included): another store
            # of this thread, or another process, may be waiting for one of them.
            for store in list(_STORES):
                if store._batched:
                    store.drain()
            fcntl.flock(writer.data_fd, fcntl.LOCK_EX)

    def _write(
        self, name: str, writer: _Writer, frames: list[bytes], data: bytes, *, wal: bool = False
    ) -> int:
        """Write ``frames`` (joined: ``data``) at the writer's end (the flock held); the first
        one's index. ``wal``: they are durable already (in a family's write-ahead file): no
        sync is due."""
        if self.before_write is not None and not wal:
            self.before_write()
        index, at = writer.count, writer.end
        offsets = array("Q", accumulate(map(len, frames[:-1]), initial=at))
        pos = at + len(data)
        if (n := os.pwrite(writer.data_fd, data, at)) != len(data):  # (`write_all` inline)
            _journal.write_rest(writer.data_fd, data, at, n)
        _write_index(writer, offsets, index)
        writer.end, writer.count = pos, index + len(frames)
        self._known.appended(name, writer.ino, index, offsets, pos)
        kept = self._crcs.get(name)
        if kept is not None and kept[0] == writer.seen:  # as kept up to this write: still so
            self._crcs[name] = (_identity(os.fstat(writer.data_fd)), kept[1])
        if not wal:
            self._unsynced.mark(writer.data_fd)
        if self.after_write is not None:
            self.after_write(writer.path, writer.ino, at, data)
        touched(writer.watched)  # tails in this process wake at once
        return index

    def hold(self, seconds: float) -> None:
        """Leave the open batches, and those opened meanwhile, to be written ``seconds`` from
        now by the loop (unless something writes them first: a read, a flush, an effect)."""
        self._drain_due = time.monotonic() + seconds

    def _drain_when_due(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._drain_queued is loop:
            self._drain_queued = None
        if self._drain_loop is not loop:
            return  # written meanwhile
        left = self._drain_due - time.monotonic()
        if left > 0.0001:  # held: one timer waits for the time, later calls find it there
            if self._drain_timer is not loop:
                self._drain_timer = loop
                loop.call_later(left, self._drain_later, loop)
            return
        self.drain()

    def _drain_later(self, loop: asyncio.AbstractEventLoop) -> None:
        self._drain_timer = None
        self._drain_when_due(loop)

    def drain(self, keep: str | None = None) -> None:
        """Write every open batch now (then their flocks are released): those of a family
        with a write-ahead file by committing the family (`commit_families`), except
        family ``keep``'s (its next commit takes them)."""
        if not self._batched and self._drain_loop is None:
            return
        if self.held is not None and self._batched:
            self._commit_routed(keep)
        with self._lock:
            self._drain_loop = None
            batched: dict[str, _Writer] = {}
            for name, writer in list(self._batched.items()):  # a family's wait for its commit
                if self._route(writer) is None:
                    batched[name] = self._batched.pop(name)
            for name, writer in batched.items():
                frames, writer.batch = writer.batch, []
                writer.end, writer.count = writer.batch_at, writer.batch_index
                try:
                    self._write(name, writer, frames, b"".join(frames))
                except OSError as exc:
                    writer.end = -1  # resync (and drop any partial frame) before the next
                    if self._failure is None:
                        where = self._fd_paths.get(writer.data_fd, name)
                        doing = f"appending {len(frames)} item(s) to stream {name!r}"
                        self._failure = storage_error(where, doing, exc)
                finally:
                    fcntl.flock(writer.data_fd, fcntl.LOCK_UN)

    def _route(self, writer: _Writer) -> str | None:
        """The family whose commits take the writer's items (None: written and synced here)."""
        root = writer.family
        return root if root is not None and self.held is not None and self.held(root) else None

    def _commit_routed(self, keep: str | None) -> None:
        assert self.commit_families is not None
        # Called holding the lock (an append waiting for a flock): a family being committed
        # on another thread meanwhile is skipped, not waited for (it takes this lock).
        nested = self._lock._is_owned()  # type: ignore[attr-defined]
        with self._lock:
            roots = {r for w in self._batched.values() if (r := self._route(w)) not in (None, keep)}
        if roots:
            self.commit_families(roots, not nested)

    def _own_batch(self, name: str) -> _Writer | None:
        """Stream ``name``'s open batch, to the drive of its family held here (call holding the
        lock): its own items, made durable by the family's next commit, counted and read from
        it, not committed first (a turn reads its history's length, first item and digest as
        it starts). None: read the files, committed first (no one else sees them before)."""
        writer = self._batched.get(name)
        root = self._route(writer) if writer is not None else None
        if root is None or root != DRIVING.get() or name in self._taken:
            return None  # (taken: being committed, neither in the file nor in the batch)
        return writer

    def length(self, name: str) -> int:
        if name in self._batched:
            with self._lock:
                if (writer := self._own_batch(name)) is not None:
                    self._raise_failure()
                    return writer.count
        return super().length(name)

    def read_spans(
        self, name: str, spans: list[tuple[int, int]], *, retry: bool = True
    ) -> list[list[Any]]:
        if name in self._batched and spans:
            with self._lock:
                if (writer := self._own_batch(name)) is not None:
                    return self._read_with_batch(writer, name, spans, retry)
        return super().read_spans(name, spans, retry=retry)

    def _read_with_batch(
        self, writer: _Writer, name: str, spans: list[tuple[int, int]], retry: bool
    ) -> list[list[Any]]:
        """`read_spans` with an open batch of its own (`_own_batch`): the items before it from
        the file as it is, the batch's decoded from its frames (as written they would read)."""
        at, count = writer.batch_index, writer.count
        below = [(s, min(e, at)) for s, e in spans]
        read = self._read_spans(self._file_index(name), name, below, retry=retry)
        if all(e <= at for _, e in spans):
            return read
        data_path, _ = self._strings(name)
        parsed = _journal.parse(b"".join(writer.batch), writer.batch_at, data_path)
        items = [r.get("v") for _, r in parsed.records]
        if len(items) != count - at:  # (never: the frames are this store's own)
            raise CorruptJournalError(data_path, writer.batch_at, what="an open batch unreadable")
        return [
            part + items[max(s - at, 0) : max(min(e, count) - at, 0)]
            for part, (s, e) in zip(read, spans, strict=True)
        ]

    def digest(
        self, name: str, count: int, after: tuple[int, Any] | None = None
    ) -> tuple[int, int] | None:
        if name in self._batched:
            with self._lock:
                if (writer := self._own_batch(name)) is not None:
                    # The file's bytes to the batch, then its frames: the file's once written.
                    at = min(count, writer.batch_index)
                    since = after if after is not None and after[0] <= at else None
                    head = self._digest(self._file_index(name), name, at, since)
                    if count <= at:
                        return head
                    if head is None or head[0] != writer.batch_at or count > writer.count:
                        return None
                    data = b"".join(writer.batch[: count - at])
                    return head[0] + len(data), zlib.crc32(data, head[1])
        return super().digest(name, count, after)

    def holds(self, root: str) -> bool:
        """Whether items of family ``root``'s streams wait in open batches for its commit."""
        if self.held is None or not self.held(root):
            return False
        return any(w.family == root for w in list(self._batched.values()))

    def _continue(self, name: str, writer: _Writer) -> None:
        """Open a batch after one `take` gave and `put` has not written yet: it goes where
        that one ends, under the flock that one holds (a resync would read the file without
        it and put both at one offset)."""
        writer.batch_at, writer.batch_index = writer.end, writer.count
        self._batched[name] = writer

    def take(self, root: str) -> list[Taken]:
        """The open batches of family ``root``'s streams, out of the open ones (their flocks
        still held: `put` writes them)."""
        taken = []
        with self._lock:
            assert self.held is not None
            held = self.held(root)
            for name in [n for n, w in self._batched.items() if held and w.family == root]:
                writer = self._batched.pop(name)
                frames, writer.batch = writer.batch, []
                data = b"".join(frames)
                taken.append(Taken(name, writer, frames, data, writer.batch_at, writer.batch_index))
                self._taken[name] = self._taken.get(name, 0) + 1
        return taken

    def put(self, taken: list[Taken], *, stored: bool) -> None:
        """Write batches `take` gave, made durable in a write-ahead file (``stored``; False:
        that failed, they are dropped, with any opened after them), and release their flocks
        (unless a batch opened since holds it). The first write that fails is raised after."""
        failure: StorageError | None = None
        with self._lock:
            for name, writer, frames, data, at, index in taken:
                left = self._taken.pop(name, 1) - 1
                if left:
                    self._taken[name] = left
                after = (writer.end, writer.count) if name in self._batched else None
                writer.end, writer.count = at, index
                try:
                    if not stored:
                        raise OSError(0, "not stored")
                    self._write(name, writer, frames, data, wal=True)
                    if after is not None:
                        writer.end, writer.count = after
                except OSError as exc:
                    writer.end, after = -1, None  # resync before the next append
                    if self._batched.pop(name, None) is not None:
                        writer.batch = []
                    if stored:
                        where = self._fd_paths.get(writer.data_fd, name)
                        doing = f"appending to stream {name!r}"
                        failure = failure or storage_error(where, doing, exc)
                finally:
                    if after is None and not left:
                        fcntl.flock(writer.data_fd, fcntl.LOCK_UN)
        if failure is not None:
            raise failure

    def sync_streams(self, names: set[str]) -> None:
        """Make the data files of streams `names` durable (a family's checkpoint), with the
        folder's entries of those this store made."""
        with self._lock:
            fds = [w.data_fd for n in names if (w := self._writers.get(n)) is not None]
        made = False
        for fd in fds:
            try:
                os.fdatasync(fd)
            except OSError as exc:
                where = self._fd_paths.get(fd, str(self.path))
                raise storage_error(where, "making stream appends durable", exc) from None
            made |= fd in self._created
        if made:
            _journal.fsync_dir(self.path)
            self._created.difference_update(fds)

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _writer(self, name: str) -> _Writer:
        writer = self._writers.get(name)
        if writer is None:
            data_path, idx_path = self._strings(name)
            try:
                if self.before_read is not None:  # (what a cut left of its family's commits)
                    self.before_read(name)
                if self.before_open is not None:
                    self.before_open(name)
                if not self.path.is_dir():
                    _journal.make_dirs(self.path)
                try:
                    data_fd = os.open(data_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                    self._created.add(data_fd)  # its entry is made durable by `flush`
                except FileExistsError:
                    data_fd = os.open(data_path, os.O_RDWR, 0o644)
                idx_fd = os.open(idx_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise storage_error(data_path, f"opening stream {name!r}", exc) from None
            writer = self._writers[name] = _Writer(data_fd, idx_fd, stream_family(name))
            self._fd_paths[data_fd] = writer.path = data_path
            writer.file = os.path.basename(data_path)
            writer.watched = os.path.join(self._resolved, writer.file)
        return writer

    def _sync(self, name: str, writer: _Writer) -> None:
        """Bring the writer up to date with the files (another process may have appended)."""
        data_path, _ = self._files(name)
        st = os.fstat(writer.data_fd)
        size = st.st_size
        if size and not os.pread(writer.data_fd, len(HEADER), 0).strip(b"\0"):
            size = 0  # zeros where the header goes: nothing of it was ever durable (a cut)
        if size == 0:
            self._known.forget(name)
            os.ftruncate(writer.data_fd, 0)
            _journal.write_all(writer.data_fd, HEADER, 0)
            os.ftruncate(writer.idx_fd, 0)
            writer.end, writer.count, writer.width = len(HEADER), 0, 4
            return
        known = self._known.get(name)
        # A reader of this store checked the files as they are (inode, size, mtime): the
        # index whole and right, the data ending at its last item. Reading and checking the
        # index again cost an old session's first append ~1.5 ms.
        if (
            known is not None
            and known.whole
            and (known.ino, known.size, known.end) == (st.st_ino, size, size)
            and known.mtime in (st.st_mtime_ns, -1)
        ):
            base, width = index_form(os.pread(writer.idx_fd, len(NARROW), 0))
            if os.fstat(writer.idx_fd).st_size == base + width * known.items and (
                width == 8 or known.offsets[known.items - 1] < _stream_index.NARROW_LIMIT
            ):
                writer.end, writer.count, writer.width = size, known.items, width
                return
        raw = os.pread(writer.idx_fd, os.fstat(writer.idx_fd).st_size, 0)
        stored = offsets_of(raw)
        count = len(stored)
        offsets, end = self._complete(str(data_path), stored, size)
        if end != size:
            os.ftruncate(writer.data_fd, end)  # a torn tail from a crashed writer
            self._known.forget(name)  # it may have known the bytes cut
        # `_complete` extends `stored` itself only when every entry checked out (`plausible`
        # gives the array it was given); otherwise it leaves it as read.
        kept = count > 0 if offsets is stored else bool(plausible(stored, size))
        # Rebuilt in the form it has (an older index stays 8-byte), unless nothing of it checked
        # out (a zero-filled one reads as the 8-byte form); never half one, half other.
        base, width = index_form(raw) if kept else (len(NARROW), 4)
        if (  # the usual case: the index is whole and right as stored (`_complete` checked
            # it); encoding it again to compare cost an old session's first append ~1 ms
            offsets is stored  # every entry checked out (`plausible` gave the array itself)
            and 0 < count == len(offsets)  # and the data holds no item past them
            and len(raw) == base + width * count  # nor the file a partial entry
            and (width == 8 or offsets[-1] < _stream_index.NARROW_LIMIT)  # the form stays
        ):
            writer.end, writer.count, writer.width = end, count, width
            return
        fresh = encode_index(offsets, width)
        if offsets and fresh != raw:
            os.ftruncate(writer.idx_fd, 0)
            _journal.write_all(writer.idx_fd, fresh, 0)
        elif not offsets and raw:
            os.ftruncate(writer.idx_fd, 0)
        writer.end, writer.count = end, len(offsets)
        writer.width = index_form(fresh if offsets else b"")[1]

    def flush(self, since: int | None = None, keep: str | None = None) -> None:
        """Make every append of this process durable (before a journal append proceeds);
        `since`: only those to the streams appended to after the `since`-th item (`appends`);
        the others stay for a later flush. `keep`: a family whose open batches its own next
        commit makes durable (see `drain`)."""
        if self._batched:
            self.drain(keep)
        self._raise_failure()
        if self.before_durable is not None:
            self.before_durable()
        for fd, number in self._unsynced.pending():
            if since is not None and self._touched.get(fd, 0) <= since:
                continue
            try:
                os.fdatasync(fd)
                if fd in self._created:  # a new file: its entry too, before a record needs it
                    _journal.fsync_dir(self.path)
                    self._created.discard(fd)
            except OSError as exc:
                where = self._fd_paths.get(fd, str(self.path))
                raise storage_error(where, "making stream appends durable", exc) from None
            self._unsynced.synced(fd, number)

    def copy(self, source: str, target: str, count: int, aside: Path) -> None:
        """Make stream `target` hold the first `count` items of `source`: their stored bytes
        copied (header and frames as they are), written in folder `aside` (on the same file
        system; what a crash leaves there is the caller's to clean), fsync'd and renamed into
        place, the folder fsync'd, so the new stream is whole and durable on return (one
        left by an interrupted copy is replaced). `StorageError` if `source` holds fewer."""
        offsets, n, end = self._index(source)
        if n < count:
            raise StorageError(f"stream {source!r} holds {n} items, not the {count} to copy")
        stop = offsets[count] if count < n else end
        src, _ = self._strings(source)
        data_path, idx_path = self._strings(target)
        self.forget([target])
        tmp = str(aside / f"{os.path.basename(data_path)}.tmp{os.getpid()}")
        tmp_idx = str(aside / f"{os.path.basename(idx_path)}.tmp{os.getpid()}")
        try:
            with open(tmp, "wb") as out:
                if stop:
                    with open(src, "rb") as f:
                        left = stop
                        while left:
                            chunk = f.read(min(left, 1 << 20))
                            if not chunk:
                                raise StorageError(f"{src}: shorter than its index says")
                            out.write(chunk)
                            left -= len(chunk)
                else:
                    out.write(HEADER)
                out.flush()
                os.fsync(out.fileno())
            with open(tmp_idx, "wb") as out:  # a cache: never fsync'd
                out.write(encode_index(offsets[:count]))
            os.replace(tmp_idx, idx_path)
            os.replace(tmp, data_path)
            _journal.fsync_dir(self.path)
        except OSError as exc:
            for path in (tmp, tmp_idx):
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise storage_error(data_path, f"copying stream {source!r}", exc) from None

    def forget(self, names: list[str]) -> None:
        """Drop what this store holds of the streams `names` (their files are being removed):
        open batches written first, then their files closed."""
        self.drain()
        with self._lock:
            for name in names:
                writer = self._writers.pop(name, None)
                if writer is not None:
                    self._unsynced.drop(writer.data_fd)
                    self._touched.pop(writer.data_fd, None)
                    os.close(writer.data_fd)
                    os.close(writer.idx_fd)
                self._known.forget(name)
                self._crcs.pop(name, None)

    def close(self) -> None:
        self.drain()
        self.flush()
        for writer in self._writers.values():
            self._closed(writer)
        self._writers.clear()

    def _closed(self, writer: _Writer) -> None:
        self._created.discard(writer.data_fd)
        self._fd_paths.pop(writer.data_fd, None)
        os.close(writer.data_fd)
        os.close(writer.idx_fd)
