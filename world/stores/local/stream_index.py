"""The forms of a stream's files: the data file's header, and the index of one little-endian
offset per item, 4 bytes after the 8-byte mark :data:`NARROW` (index version 2, what a new
stream gets), or 8 bytes with no mark (version 1; also a stream grown past 4 GiB, whose index
is rewritten so once). An index is believed only as far as it can index its data
(:func:`plausible`); a store keeps the offsets it checked of each stream (:class:`KnownOffsets`)."""

from __future__ import annotations

import operator
import sys
import threading
from array import array
from itertools import islice
from typing import NamedTuple

from ... import _journal
from ..._errors import StorageError

HEADER = _journal.frame(_journal.header("eve-world-stream"))


NARROW = b"eveidx4\n"  # opens an index of 4-byte offsets (a version-1 entry never looks so)
NARROW_LIMIT = 1 << 32  # an offset from here on needs the 8-byte form
_LITTLE = sys.byteorder == "little"


def index_form(data: bytes) -> tuple[int, int]:
    """`(where entries begin, bytes an entry)` of an index beginning with `data` (an empty
    one is a new stream's: 4-byte)."""
    return (len(NARROW), 4) if not data or data.startswith(NARROW) else (0, 8)


def offsets_of(data: bytes) -> array[int]:
    """The offsets an index (either form) holds; a partial entry at its end is left out."""
    base, width = index_form(data)
    offsets = array("Q")
    if offsets.itemsize != 8 or array("I").itemsize != 4:  # pragma: no cover - every platform
        raise StorageError("unsupported platform: array('Q'/'I') is not 8/4 bytes")
    body: bytes | bytearray = data[base:]
    body = body[: len(body) - len(body) % width]
    if width == 4 and _LITTLE:
        # Widened byte by byte (each entry's four bytes, then four zero bytes): ~5x faster
        # than converting item by item (0.6 ms for an index of 16,000 entries).
        wide = bytearray(2 * len(body))
        for k in range(4):
            wide[k::8] = body[k::4]
        body = wide
    elif width == 4:  # pragma: no cover - a big-endian machine
        narrow = array("I")
        narrow.frombytes(body)
        return array("Q", narrow)
    offsets.frombytes(body)
    return offsets


def index_offsets(data: bytes) -> list[int]:
    """The offsets an index file's bytes `data` hold (either form)."""
    return list(offsets_of(data))


def plausible(offsets: array[int], size: int) -> array[int]:
    """The longest prefix of `offsets` that can index a data file of `size` bytes: the first
    entry just past the header, each one after the one before, all inside the file (what a
    zero-filled or torn page of an index breaks). Checked once per read of the index file,
    in C loops over the whole array (the usual case: all of it)."""
    if not offsets:
        return offsets
    if offsets[0] != len(HEADER):
        return array("Q")
    if offsets[-1] < size and all(map(operator.lt, offsets, islice(offsets, 1, None))):
        return offsets
    for i in range(1, len(offsets)):
        if not offsets[i - 1] < offsets[i] < size:
            return offsets[:i]
    return offsets  # pragma: no cover - the check above found a bad entry


def encode_index(offsets: array[int] | list[int], width: int = 4) -> bytes:
    """An index of `offsets`: 4-byte form (with its mark) unless one needs 8 bytes or
    `width` is 8."""
    if width == 4 and (not offsets or max(offsets) < NARROW_LIMIT):
        return NARROW + array("I", offsets).tobytes()
    return array("Q", offsets).tobytes()


class Known(NamedTuple):
    """A stream's offsets as checked against its data file (inode, size and modification
    time at the check; `mtime` -1: as this store's own append left it, which only grows it).
    `offsets` is only ever appended to, so a reader keeps using its first `items` entries."""

    ino: int
    size: int
    offsets: array[int]
    items: int
    end: int
    mtime: int = -1
    whole: bool = False  # the index file held exactly these offsets when read (or written)


KNOWN_MAX = 4096  # streams whose offsets a store keeps (then it forgets them all)


class KnownOffsets:
    """The offsets a store last checked of each stream (:class:`Known`), shared by its
    readers and its writers on any thread (appends may run on I/O threads).

    An entry is believed only while the data file's inode, size and modification time are
    the ones it records, or, with `mtime` -1, as this store's own appends left it; its
    `offsets` array is only ever appended to, so a reader keeps using its first `items`
    entries while a writer extends it. At most `KNOWN_MAX` streams are kept."""

    def __init__(self) -> None:
        self._known: dict[str, Known] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Known | None:
        with self._lock:
            return self._known.get(name)

    def put(self, name: str, known: Known) -> None:
        with self._lock:
            if len(self._known) >= KNOWN_MAX and name not in self._known:
                self._known.clear()
            self._known[name] = known

    def forget(self, name: str) -> None:
        with self._lock:
            self._known.pop(name, None)

    def appended(self, name: str, ino: int, index: int, added: array[int], end: int) -> None:
        """Items were written at `added` (the offsets of items `index`...), the file now ending
        at `end`: an entry known exactly up to them takes them on; any other is left for the
        next read to check against the files."""
        at = added[0]
        with self._lock:
            known = self._known.get(name)
            if known is None or (known.ino, known.size, known.items, known.end) != (
                ino,
                at,
                index,
                at,
            ):
                return
            known.offsets.extend(added)  # every kept array holds exactly `items` entries
            self._known[name] = Known(
                ino, end, known.offsets, index + len(added), end, whole=known.whole
            )
