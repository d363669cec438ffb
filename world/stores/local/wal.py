"""A family's write-ahead file (`runs/<root>/wal.msgpack`): how one commit is made durable
with one `fdatasync`.

A commit of a family (its journal records and the items of its streams, `LocalWorld`'s
`_commit_family`) is written here as one entry and this one file is fdatasync'd; only then
are the records and items written into the journal and stream files, which are not synced:
a reader never sees anything that is not durable, and the step's text costs no sync of its
own. A checkpoint (when the lease is released, on close, and once the file holds
:data:`CHECKPOINT_BYTES`) syncs the journal and the stream files the entries touched and
empties this file, so it stays small and stores nothing for long.

An entry names where its bytes go (absolute offsets) and replaying it writes them there again:
replay is idempotent (bytes at an offset a commit wrote never change, see below), and an
open of the family (`LocalWorld.acquire`) or a repair replays whatever the file holds before
anything else reads or writes the family.

```
header  b"evewal" 0x00 0x01 | epoch (8 bytes) | crc32 of the 16 bytes before (4)
entry   length (4) | crc32(epoch + body) (4) | body: msgpack [[kind, name, offset, bytes], ...]
```

`kind` is "j" (the journal; `name` empty) or "s" (a stream's data file, `name` its file name
in `streams/`). Entries follow the header; replay stops at the first one whose length runs
past the file or whose crc fails (a torn tail: the commit it held never returned). Emptying
the file picks a new random epoch: an entry left from before (the file reset in place, or a
truncation a cut undid) fails its crc under the new one, so stale entries are never mixed
with new ones; one a cut brings back with its old header is replayed again, which is harmless.

Bytes a commit wrote stay as they are: the journal and the streams are append-only, a torn
tail is cut only past the last whole record (which a replay restores first), and the calls
that do rewrite a family's files (a repair, a removal) replay or remove this file first.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from dataclasses import dataclass

import msgpack

from ... import _faults, _journal
from ..._errors import StorageError, storage_error
from ..._world import stream_family
from .files import WAL

NAME = WAL  # runs/<root>/wal.msgpack
MAGIC = b"evewal\x00\x01"
HEADER = 20  # magic, epoch, crc
_ENTRY = struct.Struct("<II")
# The file is emptied once an entry leaves it past this (a long turn that never parks).
CHECKPOINT_BYTES = 4 << 20
RESERVE = 256 << 10  # allocated ahead at a time: an fdatasync inside the size commits less

Op = tuple[str, str, int, bytes]  # (kind, name, offset, bytes)


def _header(epoch: bytes) -> bytes:
    head = MAGIC + epoch
    return head + struct.pack("<I", zlib.crc32(head))


def entry(epoch: bytes, ops: list[Op]) -> bytes:
    body: bytes = msgpack.packb(ops, use_bin_type=True)  # (a tuple packs as an array)
    return _ENTRY.pack(len(body), zlib.crc32(body, zlib.crc32(epoch))) + body


def parse(data: bytes) -> list[list[Op]]:
    """The entries a write-ahead file's bytes hold, up to the first torn or stale one."""
    if len(data) < HEADER or data[:8] != MAGIC:
        return []
    epoch = data[8:16]
    if struct.unpack("<I", data[16:HEADER])[0] != zlib.crc32(data[:16]):
        return []
    out, pos, seed = [], HEADER, zlib.crc32(epoch)
    while pos + _ENTRY.size <= len(data):
        length, crc = _ENTRY.unpack_from(data, pos)
        body = data[pos + _ENTRY.size : pos + _ENTRY.size + length]
        if length == 0 or len(body) != length or zlib.crc32(body, seed) != crc:
            break
        try:
            ops = [(str(k), str(n), int(o), bytes(b)) for k, n, o, b in msgpack.unpackb(body)]
        except Exception:
            break
        out.append(ops)
        pos += _ENTRY.size + length
    return out


def read(path: str) -> list[list[Op]]:
    try:
        with open(path, "rb") as f:
            return parse(f.read())
    except FileNotFoundError:
        return []


@dataclass
class Replayed:
    """What a replay wrote: entries, and bytes that differed from the files (0: they held
    every entry already, as after a kill -9)."""

    entries: int = 0
    changed: int = 0
    stale: bool = False  # the files hold other bytes where they go: nothing was written


def replay(folder: str, streams: str, *, dry_run: bool = False) -> Replayed:
    """Write every entry of run folder `folder`'s write-ahead file into the journal and the
    stream files (under `streams`), make them durable, then empty the file; the caller holds
    the family's lease. `dry_run`: only say what it would change."""
    path = os.path.join(folder, NAME)
    entries = read(path)
    if not entries:
        return Replayed()
    files = _Targets(folder, streams, dry_run)
    try:
        writes = [w for ops in entries for op in ops if (w := files.check(*op)) is not None]
        files.done.entries = len(entries)
        if files.done.stale:
            writes = []  # not this family's commits any more: nothing is written
        files.done.changed = sum(len(data) for _, _, data in writes)
        if not dry_run:
            for fd, offset, data in writes:
                _journal.write_all(fd, data, offset)
            files.sync()
            empty(path)
    except OSError as exc:
        raise storage_error(path, "replaying the run's write-ahead file", exc) from None
    finally:
        files.close()
    return files.done


class _Targets:
    """The files a replay writes, each opened once."""

    def __init__(self, folder: str, streams: str, dry_run: bool) -> None:
        self.folder, self.streams, self.dry_run = folder, streams, dry_run
        self.fds: dict[str, int] = {}
        self.created = False
        self.done = Replayed()

    def check(
        self, kind: str, name: str, offset: int, data: bytes
    ) -> tuple[int, int, bytes] | None:
        """The write an op needs (None: none). Bytes a commit wrote were written nowhere else
        and only ever after it: the file holds them, or zeros or nothing where a cut lost
        them. Other bytes there mean the entry is not this family's commit any more (an eve
        without write-ahead files wrote the family since): the replay writes nothing."""
        target = _target(self.folder, self.streams, kind, name)
        if target is None:
            return None
        fd = self.fds.get(target)
        if fd is None:
            fd, made = _open(target, offset, self.dry_run)
            if fd < 0:
                return None  # a stream removed since (its family's record goes too)
            self.created |= made
            self.fds[target] = fd
        held = os.pread(fd, len(data), offset)
        if held == data:
            return None
        if any(h and h != d for h, d in zip(held, data, strict=False)):
            self.done.stale = True
        return fd, offset, data

    def sync(self) -> None:
        for fd in self.fds.values():
            os.fdatasync(fd)
        if self.created:
            _journal.fsync_dir(self.streams)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


def _target(folder: str, streams: str, kind: str, name: str) -> str | None:
    if kind == "j":
        return os.path.join(folder, "journal.msgpack")
    if kind == "s" and name and os.sep not in name and not name.startswith("."):
        return os.path.join(streams, name)
    return None  # no entry this eve writes


def _open(target: str, offset: int, dry_run: bool) -> tuple[int, bool]:
    """An fd on `target` (-1: missing and not to be made) and whether it was made: a stream
    file is made again only by an entry that begins it (its header at offset 0: made in the
    commit, its entry lost with the cut); one that entries only continue was removed."""
    flags = os.O_RDONLY if dry_run else os.O_RDWR
    try:
        return os.open(target, flags), False
    except FileNotFoundError:
        if offset != 0 or dry_run or target.endswith("journal.msgpack"):
            return -1, False
    return os.open(target, os.O_RDWR | os.O_CREAT, 0o644), True


Patch = tuple[int, bytes]  # bytes an entry holds and its file does not, at their offset


class View:
    """What a reader (`LocalWorld(create=False)`) reads of a family: its files with the
    entries of its write-ahead file that they do not hold yet applied in memory (a kill or a
    cut after a commit, before a writer replayed it). Nothing is written and no lock taken;
    one `stat` a read (a parked family's file is empty), the entries read again only when
    the file changed."""

    def __init__(self, runs: str, streams: str, leased: set[str]) -> None:
        self._runs, self._streams, self._leased = runs, streams, leased
        self._seen: dict[str, tuple[tuple[int, int, int], dict[str, list[Patch]]]] = {}

    def patches(self, root: str) -> dict[str, list[Patch]]:
        """Family `root`'s patches, by the path of the file they go in (none: {}; none for a
        family this process leases: its files hold every commit, replayed at `acquire`)."""
        if root in self._leased:
            return {}
        folder = os.path.join(self._runs, root)
        try:
            st = os.stat(os.path.join(folder, NAME))
        except (OSError, ValueError):
            return {}
        if not st.st_size:
            if self._seen:
                self._seen.pop(root, None)
            return {}
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        seen = self._seen.get(root)
        if seen is not None and seen[0] == stamp:
            return seen[1]
        found = missing(folder, self._streams)
        if len(self._seen) >= 4096:
            self._seen.clear()
        self._seen[root] = (stamp, found)
        return found

    def stream(self, name: str, path: str) -> list[Patch] | None:
        """The patches of stream `name`'s data file `path` (its family's: `stream_family`)."""
        root = stream_family(name)
        return None if root is None else self.patches(root).get(path)


def missing(folder: str, streams: str) -> dict[str, list[Patch]]:
    """What run folder `folder`'s write-ahead file holds that its files do not, by file (as
    `replay` would write it; nothing when the files hold other bytes there)."""
    entries = read(os.path.join(folder, NAME))
    if not entries:
        return {}
    files = _Targets(folder, streams, dry_run=True)
    try:
        writes = [w for ops in entries for op in ops if (w := files.check(*op)) is not None]
        paths = {fd: path for path, fd in files.fds.items()}
    except OSError:
        return {}
    finally:
        files.close()
    if files.done.stale:
        return {}
    out: dict[str, list[Patch]] = {}
    for fd, offset, data in writes:
        out.setdefault(paths[fd], []).append((offset, data))
    return out


def patched(data: bytes, patches: list[Patch]) -> bytes:
    """`data` (a file's bytes from its start) with `patches` written over it."""
    out = bytearray(data)
    for offset, piece in patches:
        end = offset + len(piece)
        if len(out) < end:
            out.extend(bytes(end - len(out)))
        out[offset:end] = piece
    return bytes(out)


def read_patched(path: str, start: int, patches: list[Patch]) -> _journal.ReadResult:
    """`_journal.read_file(path, start)` of the journal with `patches` applied."""
    try:
        with open(path, "rb") as f:
            data = patched(f.read(), patches)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise storage_error(path, "reading the run's journal", exc) from None
    result = _journal.parse(data[start:], start, path)
    if start == 0 and result.records:
        _journal.check_header(path, result.records[0][1])
    return result


def empty(path: str) -> None:
    """Empty a write-ahead file (not synced: one a cut brings back replays harmlessly)."""
    with contextlib.suppress(FileNotFoundError):
        os.truncate(path, 0)


class Wal:
    """The write-ahead file of one family, open for its lease holder."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, NAME)
        self.made = False  # this open made the file: its entry is the caller's to sync
        try:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                self.made = True
            except FileExistsError:
                self._fd = os.open(self.path, os.O_RDWR)
            size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise storage_error(self.path, "opening the run's write-ahead file", exc) from None
        self.end = 0  # where the next entry goes (0: the header first)
        self._size = size  # allocated up to here
        self._epoch = b""
        self.bytes = 0  # entries' bytes since the last checkpoint

    def commit(self, ops: list[Op], fault: str | None = None) -> None:
        """Write one entry holding `ops` and make it durable; on failure the file is as it
        was (`StorageError`). `fault`: one `EVE_FAULTS` injects into this write."""
        if not self.end:
            self._epoch = os.urandom(8)
            data = _header(self._epoch) + entry(self._epoch, ops)
        else:
            data = entry(self._epoch, ops)
        at = self.end
        if at + len(data) > self._size:
            self._reserve(at + len(data))
        try:
            if fault is not None:
                _faults.before_file_write(fault, self._fd, data, at)
            _journal.write_all(self._fd, data, at)
            os.fdatasync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # a torn entry is never read (crc); zero it
                os.pwrite(self._fd, bytes(min(len(data), 16)), at)
            raise StorageError(
                f"{self.path}: write failed ({exc.strerror}); nothing of this commit was "
                "stored and nothing stored before was lost — free space or fix the disk, "
                "then retry"
            ) from None
        if fault == "crash_after_fsync":
            _faults.kill_self()
        self.end = at + len(data)
        self.bytes += len(data)

    def _reserve(self, need: int) -> None:
        allocate = getattr(os, "posix_fallocate", None)
        if allocate is None:
            return
        with contextlib.suppress(OSError):  # no space for more: plain appends
            allocate(self._fd, self._size, need + RESERVE - self._size)
            self._size = need + RESERVE

    def reset(self, *, give_back: bool) -> None:
        """After a checkpoint: entries begin again after a new header (a new epoch); with
        `give_back`, the file is emptied (its size is the family's on disk)."""
        self.end = self.bytes = 0
        if give_back and self._size:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            self._size = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
