"""Journal framing: append-only files of checksummed msgpack records.

A journal is a plain concatenation of msgpack objects (`msgpack.Unpacker` reads it). Each
object is a frame `[1, crc32(body), body]` where `body` is the codec encoding of one record
map. The first record of a file is a header `{"t": "header", "format": ..., "version": ...}`.

Reading stops at the last complete, checksummed record. A record cut short at the end (a crash
mid-write) is a torn tail and is discarded; any other damage — a bad record with a valid one
after it, or a last record of full length whose checksum fails (a bit flip in a record already
written) — is `CorruptJournalError(file, offset)`. Writers append with one `write` and
`fdatasync`; when the disk refuses (ENOSPC, EIO) they truncate back so the file stays valid.

A journal's writer may reserve the space ahead of its end (`Writer(reserve=True)`, from its
ninth append on): the file
then ends in zero bytes, each of which `msgpack.Unpacker` reads as the integer 0, and a reader
stops at the first zero byte where a record would begin. An `fdatasync` after writing into
space already allocated, inside the file's size, commits less than one after an append that
grows the file (on ext4 here ~25% less time). The writer gives the space back when it closes; what
a killed writer left is dropped by the next one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from . import _codec, _faults
from ._errors import (
    CorruptJournalError,
    StorageError,
    StoreFormatError,
    WorldError,
    os_reason,
)

FRAME_VERSION = 1
JOURNAL_FORMAT = "eve-world-journal"
# The record forms of each kind of file, frozen with store format 2 (`local.FORMAT`): one
# version each, the one a file of the kind is created with; a header of any other version is
# refused (versions below these were pre-release forms, `Family.pack` describes the current).
JOURNAL_VERSION = 5
INBOX_FORMAT = "eve-world-inbox"
# Deliveries as `_world.inbox_record` stores them; the header of a compacted inbox carries
# `base`, the id of the first byte after it: a delivery's id stays its offset in the file as if
# never compacted (file position + `base` - header length). Without `base` (an inbox never
# compacted) ids are file positions.
INBOX_VERSION = 3
HEADER_MAX = 256  # an inbox header frame is ~70 bytes
_FRAME_START = b"\x93\x01"  # fixarray(3) then the frame version 1


# The record version of each kind of file (stream "eve-world-stream": 1).
VERSIONS = {JOURNAL_FORMAT: JOURNAL_VERSION, INBOX_FORMAT: INBOX_VERSION}


def header(kind: str = JOURNAL_FORMAT) -> dict[str, Any]:
    return {"t": "header", "format": kind, "version": VERSIONS.get(kind, 1)}


def frame(record: dict[str, Any], what: str = "record") -> bytes:
    """Encode one record as a checksummed frame."""
    body = _codec.encode(record, what)
    out: bytes = _FRAMES.packer.pack([FRAME_VERSION, zlib.crc32(body), body])  # frame_body's
    return out


class _FramePackers(threading.local):
    def __init__(self) -> None:
        self.packer = msgpack.Packer(use_bin_type=True)  # one per thread: see _codec._Packers


_FRAMES = _FramePackers()


def frame_body(body: bytes) -> bytes:
    out: bytes = _FRAMES.packer.pack([FRAME_VERSION, zlib.crc32(body), body])
    return out


_GAP_BODY = b"\xa1t\xa3gap"  # a gap record's body after its map's first byte: key t, "gap"


def _check_frame(obj: Any, decode: bool = True) -> tuple[dict[str, Any], int] | None:
    """The record of a valid frame and its checksum; None when the frame is damaged.
    `decode=False`: the checksum only, the record read as `{}` (or `{"t": "gap"}`)."""
    # `type(...) is int`: msgpack's true reads as a bool, and True == 1 (a damaged version byte
    # 0x01 -> 0xc3 passed for the frame version).
    if not (isinstance(obj, list) and len(obj) == 3 and type(obj[0]) is int):
        return None
    version, crc, body = obj
    if version != FRAME_VERSION or type(crc) is not int or not isinstance(body, bytes):
        return None
    if zlib.crc32(body) != crc:
        return None
    if not decode:
        return ({"t": "gap"} if body[1:7] == _GAP_BODY else {}), crc
    try:
        record = _codec.decode(body)
    except Exception:
        return None
    return (record, crc) if isinstance(record, dict) else None


@dataclass
class ReadResult:
    """Records read from `start`, with the offset just past the last valid one."""

    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    end: int = 0
    torn: bool = False  # bytes after `end` were discarded as a torn tail
    crcs: list[int] = field(default_factory=list)  # each record's checksum, in order


def parse(data: bytes, base: int, file: str, *, decode: bool = True) -> ReadResult:
    """Parse frames from `data`, which starts at offset `base` of `file`.

    A frame that is not valid ends the records. It is a torn tail only if a write cut short
    explains it: its bytes end before its frame says (the file ends inside it), or its missing
    end reads as zeros inside space a writer reserved (zeros after it). Anything else — a
    full-length frame with a bad checksum, bytes that are no frame, a bad frame with valid
    ones after it — is damage: `CorruptJournalError` at its offset. `decode=False` checks
    the frames only (each record reads as `{}`, a gap record as `{"t": "gap"}`).
    """
    result = ReadResult(end=base)
    # A frame is an array of 3: its header cut after a byte or two declares more elements
    # than the data holds, which is a write cut short (OutOfData), not bytes that are no frame.
    size = max(len(data), 1)
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=size, max_array_len=max(size, 3))
    unpacker.feed(data)
    pos = 0
    while pos < len(data):
        short = whole = False
        try:
            obj = unpacker.unpack()
        except msgpack.OutOfData:  # the data ends inside it
            checked, short = None, True
        except Exception:  # bytes no write cut short leaves (a frame's prefix + zeros is msgpack)
            checked = None
        else:
            checked, whole = _check_frame(obj, decode), True
        if checked is None:
            if data[pos] == 0 and data.count(0, pos) == len(data) - pos:
                break  # space a writer reserved: the records end here
            if _valid_frame_after(data, pos + 1):
                raise CorruptJournalError(file, base + pos)
            if short or (whole and _cut_short(data, base, pos, unpacker.tell())):
                result.torn = True
                break
            raise CorruptJournalError(
                file,
                base + pos,
                "bad checksum",
                what=f"the last record (offset {base + pos}) is whole but fails its checksum: "
                "damage to a record already written, not a write cut short",
            )
        result.records.append((base + pos, checked[0]))
        result.crcs.append(checked[1])
        pos = unpacker.tell()
        result.end = base + pos
    return result


BLOCK = 512  # a power cut zeroes what it did not write in whole blocks (sectors, pages)


def _cut_short(data: bytes, base: int, pos: int, end: int) -> bool:
    """Whether a whole-looking last frame at `pos` (ending at `end`) is a write cut short,
    its unwritten part reading as zeros: inside space a writer reserved (the frame ends in a
    zero byte and zeros follow it), or under a size a power cut kept without the blocks
    (zeros from a block boundary inside the frame to the end). A frame whose own last byte
    is zero, damaged where such zeros follow it, reads the same: the one case this cannot
    tell apart."""
    if 0 < end < len(data) and data[end - 1] == 0 and data.count(0, end) == len(data) - end:
        return True
    written = len(data.rstrip(b"\0"))
    return pos < written < end <= len(data) and (base + written) % BLOCK == 0


def head_from(data: bytes) -> dict[str, Any] | None:
    """The head a head file's bytes hold, or None: a frame (what is written now, in place: a
    read may meet a write, so only its first object counts) whose checksum holds. A damaged
    frame, and a head in the form older eve wrote (one plain map, no checksum: damage to it
    cannot be told from data), are not believed: the head is a cache, rebuilt from the
    journal (`is_plain_head` tells the second apart, for `eve doctor`)."""
    try:
        first = _codec.decode(data)  # the usual case, one object: a frame
    except msgpack.ExtraData as extra:
        first = extra.unpacked  # a frame, then what a longer head left until it is cut
    except Exception:
        return None
    checked = _check_frame(first)
    return checked[0] if checked is not None else None


def is_plain_head(data: bytes) -> bool:
    """Whether a head file holds the older form: one plain map, without a checksum."""
    try:
        return isinstance(_codec.decode(data), dict)
    except Exception:
        return False


def _valid_frame_after(data: bytes, start: int) -> bool:
    # Only on the error path: is there any complete, checksummed frame after `start`?
    return next_valid_frame(data, start) is not None


def next_valid_frame(data: bytes, start: int) -> int | None:
    """The offset of the first complete, checksummed frame at or after `start` (None: none)."""
    i = data.find(_FRAME_START, start)
    while i != -1:
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
        unpacker.feed(data[i:])
        try:
            if _check_frame(unpacker.unpack()) is not None:
                return i
        except Exception:
            pass
        i = data.find(_FRAME_START, i + 1)
    return None


def read_file(path: str, start: int = 0, *, decode: bool = True) -> ReadResult:
    """Read a journal file from offset `start` (0 = from its header); `decode=False`:
    check its frames only (see `parse`)."""
    return _read(path, start, inbox=False, decode=decode)


def inbox_layout(data: bytes) -> tuple[int, int]:
    """`(shift, header end)` of an inbox whose file begins with `data`: a delivery's id is its
    file position + shift (0 for a file never compacted, or one without a readable header)."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    try:
        checked = _check_frame(unpacker.unpack())
    except Exception:
        return 0, 0
    if checked is None or checked[0].get("t") != "header":
        return 0, 0
    end, base = unpacker.tell(), checked[0].get("base")
    return (base - end if isinstance(base, int) and base >= end else 0), end


def read_inbox_file(path: str, start: int = 0) -> ReadResult:
    """Read an inbox from delivery id `start` (0 = from its header) through one open file (a
    compaction may replace it meanwhile); positions and `end` in the result are ids."""
    return _read(path, start, inbox=True)


def _read(path: str, start: int, *, inbox: bool, decode: bool = True) -> ReadResult:
    if _faults.ACTIVE and _faults.next_read() == "eio_read":
        raise StorageError(f"{path}: cannot read: {os.strerror(errno.EIO)} (injected)")
    shift = 0
    try:
        with open(path, "rb") as f:
            begin = start
            if inbox:
                shift, header_end = inbox_layout(f.read(HEADER_MAX))
                begin = start - shift if start - shift >= max(header_end, 1) else 0
            f.seek(begin)
            data = f.read()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StorageError(f"{path}: cannot read: {os_reason(exc)}") from None
    result = parse(data, begin, path, decode=decode)
    if begin == 0 and result.records and decode:
        check_header(path, result.records[0][1])
    if shift:
        result.records = [(pos + shift, rec) for pos, rec in result.records]
        result.end += shift
    return result


def check_header(path: str, record: dict[str, Any]) -> None:
    if record.get("t") != "header":
        raise WorldError(f"{path}: not an eve-world journal (no header record)")
    version, known = record.get("version"), VERSIONS.get(record.get("format", ""), 1)
    if not isinstance(version, int) or version > known:
        raise StoreFormatError(
            f"{path}: journal version {version!r} is newer than this eve understands "
            f"({known}); upgrade eve to read it"
        )
    if version < known:
        raise StoreFormatError(
            f"{path}: journal version {version} is a pre-release form this eve no longer reads "
            f"(it reads {known}); nothing was changed: read it with the version that wrote it"
        )


_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of the range, do not wait
RESERVE = 256 << 10  # space a reserving writer allocates ahead of its end at a time
# Appends a writer makes before it reserves: allocating and giving back cost ~0.2 ms, which a
# short drive (a one-step turn: three records) would not win back.
RESERVE_AFTER = 8

_WRITEBACK: list[Any] = []  # [sync_file_range] once looked up ([None]: not on this system)


def _writeback() -> Any:
    """libc's `sync_file_range` (None where there is none): starts writing a range to the
    disk and returns at once. Looked up on first use (ctypes is not imported before)."""
    if not _WRITEBACK:
        found = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                found = libc.sync_file_range
                found.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                found.restype = ctypes.c_int
            except (OSError, AttributeError):
                found = None
        _WRITEBACK.append(found)
    return _WRITEBACK[0]


def can_defer() -> bool:
    """Whether a writer here can start a record's write and wait for it later (see
    :meth:`Writer.append`)."""
    return _writeback() is not None


class Writer:
    """Appends frames to one file durably; a failed append leaves the file as it was. With
    ``reserve``, the space ahead of the end is allocated :data:`RESERVE` bytes at a time (see
    the module's docstring) and given back by :meth:`close`."""

    def __init__(self, path: str, end: int, *, reserve: bool = False) -> None:
        self.path = path
        self.end = end
        self._dirty = False
        self._reserve = reserve
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            st = os.fstat(self._fd)
            self.ino = st.st_ino  # the file it writes (check_intact's memory is by inode)
            if st.st_size != end:
                os.ftruncate(self._fd, end)  # drop a torn tail (or reserved space) first
        except OSError as exc:
            raise StorageError(f"{path}: cannot open for writing: {os_reason(exc)}") from None
        self._size = end  # the file's size: what it holds up to here is allocated
        self.unsettled: int | None = None  # where deferred appends not yet durable begin
        self._appends = 0
        self._settling = threading.Lock()

    def give_back(self) -> None:
        """Give the reserved space back (its size is not the journal's): settle, then cut
        the file at its end. The next append reserves again."""
        self.settle()
        if self._size > self.end:
            with contextlib.suppress(OSError):  # no fsync: readers stop at zeros anyway
                os.ftruncate(self._fd, self.end)
            self._size = self.end

    def _extend(self, need: int) -> None:
        allocate = getattr(os, "posix_fallocate", None)  # not on every system (macOS)
        if allocate is None:
            self._reserve = False
            return
        try:
            allocate(self._fd, self._size, need + RESERVE - self._size)
            self._size = need + RESERVE
        except OSError:  # no space for more, or a file system without it: plain appends
            self._reserve = False

    def _start(self, size: int) -> int:
        """Where a write of `size` bytes goes: the end, after a torn tail is rolled back and,
        past the first appends, space reserved ahead."""
        offset = self.end
        if self._dirty:
            self._roll_back()
        self._appends += 1
        if self._reserve and offset + size > self._size and self._appends > RESERVE_AFTER:
            self._extend(offset + size)
        return offset

    def append(self, data: bytes, *, sync: bool = True, defer: bool = False) -> int:
        """Write `data` at the end and fdatasync it (unless `sync` is False); return its offset.

        `defer`: start writing it to the disk and return; :meth:`settle` waits until it is
        durable (the caller calls it before anything that must come after the record). The
        work in between overlaps the disk's; the `fdatasync` then has less to wait for."""
        offset = self._start(len(data))
        fault = _faults.next_write() if _faults.ACTIVE else None
        if fault is not None:
            self.settle()  # at a fault point every earlier record is durable
        try:
            if fault is not None:
                _faults.before_file_write(fault, self._fd, data, offset)
            if (n := os.pwrite(self._fd, data, offset)) != len(data):  # (`write_all` inline)
                write_rest(self._fd, data, offset, n)
            writeback = _WRITEBACK[0] if _WRITEBACK else _writeback()
            if sync and defer and fault is None and writeback is not None:
                writeback(self._fd, offset, len(data), _SYNC_FILE_RANGE_WRITE)
                # Under the lock: a settle running on another thread (a read draining the
                # streams) either covers this write or leaves it marked for the next one.
                with self._settling:
                    if self.unsettled is None:
                        self.unsettled = offset  # durable once `settle` returns
            elif sync:
                with self._settling:
                    os.fdatasync(self._fd)  # everything before it too
                    self.unsettled = None
        except OSError as exc:
            self._roll_back()
            raise StorageError(
                f"{self.path}: write failed ({exc.strerror}); the file was rolled back to its "
                "last complete record, nothing stored before was lost — free space or fix the "
                "disk, then retry"
            ) from None
        if fault == "crash_after_fsync":
            _faults.kill_self()
        self.end = offset + len(data)
        return offset

    def write(self, data: bytes) -> int:
        """Write `data` at the end without a sync (it is durable elsewhere already: a
        family's write-ahead file); return its offset. A failure leaves the file as it was."""
        offset = self._start(len(data))
        try:
            write_all(self._fd, data, offset)
        except OSError as exc:
            self._roll_back()
            raise StorageError(f"{self.path}: write failed ({exc.strerror})") from None
        self.end = offset + len(data)
        return offset

    def cut(self, end: int) -> None:
        """Take back what was written from `end` on (its commit failed)."""
        if end < self.end:
            self.end = end
            self._roll_back()

    def sync(self) -> None:
        """Make everything written durable (`write`'s bytes: a checkpoint)."""
        with self._settling:
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                raise StorageError(f"{self.path}: sync failed ({exc.strerror})") from None
            self.unsettled = None

    def settle(self) -> None:
        """Wait until a deferred append is durable (see :meth:`append`). If the disk fails
        it now, the record is rolled back and :class:`StorageError` raised, as an append's."""
        if self.unsettled is None:
            return
        with self._settling:  # a second caller returns only once the record is durable
            offset = self.unsettled
            if offset is None:
                return
            try:
                os.fdatasync(self._fd)
                self.unsettled = None
                return
            except OSError as exc:
                self.unsettled, self.end = None, offset
                self._roll_back()
                error = exc
            raise StorageError(
                f"{self.path}: write failed ({error.strerror}); the file was rolled back to "
                "its last complete record, nothing stored before was lost — free space or fix "
                "the disk, then retry"
            ) from None

    def _roll_back(self) -> None:
        try:
            os.ftruncate(self._fd, self.end)
            self._size = self.end
            os.fdatasync(self._fd)
            self._dirty = False
        except OSError:
            self._dirty = True  # retried before the next append; readers discard it anyway

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self.give_back()  # settles: may raise what the disk refused
            finally:
                os.close(self._fd)
                self._fd = -1


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the entries of directory `path` durable (files created, renamed or removed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """`mkdir -p path`, each directory it creates durable in its parent before the next is
    made (a power cut keeps a directory entry only once its parent was fsync'd)."""
    if path.is_dir():
        return
    make_dirs(path.parent)
    try:
        path.mkdir()
    except FileExistsError:
        return
    fsync_dir(path.parent)


def write_all(fd: int, data: bytes, offset: int) -> None:
    n = os.pwrite(fd, data, offset)
    if n != len(data):  # rarely: nearly always one call, no view
        write_rest(fd, data, offset, n)


def write_rest(fd: int, data: bytes, offset: int, n: int) -> None:
    """Write what is left of `data` (at `offset`) after a write that took its first `n`
    bytes (a hot caller makes that first `os.pwrite` itself)."""
    view = memoryview(data)[n:]
    offset += n
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n
