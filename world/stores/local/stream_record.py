"""Each family's record of its streams (`runs/<root>/streams.list`), for LocalWorld.

A family's streams are files `streams/<kind>.<root>[...]` among every other family's, and
kinds are open-ended: finding one family's meant listing them all (40,000 names at 10,000
sessions, ~18 ms for a process that wakes one). The record names them instead, one stream name
a line, appended by the lease holder before it makes a stream's file, so a process killed at any
point leaves no stream of a family unnamed.

After a power cut the record must name every stream whose data was ever durable: it is
fdatasync'd before any stream data is (`StreamStore.before_durable`). A stream a cut left unnamed
therefore holds nothing durable and nothing the journal refers to; a torn last line (no newline)
names such a stream and is ignored. A family without a record (made by an older eve) has its
streams listed, and gets a whole record when it is next leased (`LocalWorld.acquire`).
"""

from __future__ import annotations

import contextlib
import os
import threading

from ... import _journal
from ..._errors import storage_error
from ..._world import stream_family

RECORD = "streams.list"
_CACHED_MAX = 4096
_SYNCING = "making a family's record of its streams durable"


class StreamRecords:
    """The records under `runs`: read (cached while a record's inode and size are as they
    were), appended to, made durable."""

    def __init__(self, runs: str) -> None:
        self._runs = runs
        self._lock = threading.Lock()  # appends come from the loop and I/O threads
        self._cached: dict[str, tuple[tuple[int, int], frozenset[str]]] = {}
        self._unsynced: set[str] = set()  # records appended to, not yet fdatasync'd

    def path(self, root: str) -> str:
        return os.path.join(self._runs, root, RECORD)

    def names(self, root: str) -> frozenset[str] | None:
        """The stream names family `root`'s record holds; None: it has no record."""
        path = self.path(root)
        try:
            st = os.stat(path)
        except OSError:  # none, or unreadable: the caller lists the folder instead
            return None
        stamp = (st.st_ino, st.st_size)
        cached = self._cached.get(root)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        names = frozenset(parse(data, root))
        if len(self._cached) >= _CACHED_MAX:
            self._cached.clear()
        self._cached[root] = (stamp, names)
        return names

    def note(self, name: str) -> None:
        """Stream `name` is about to be opened for appends: name it in its family's record if
        the family has one and it is not there yet (made durable by `sync`)."""
        root = stream_family(name)
        if root is None:
            return
        with self._lock:
            names = self.names(root)
            if names is None or name in names:
                return
            try:
                fd = os.open(self.path(root), os.O_WRONLY | os.O_APPEND)
            except FileNotFoundError:
                return  # removed since (`eve gc`): the family is going
            try:
                _journal.write_all(fd, f"{name}\n".encode(), 0)
            finally:
                os.close(fd)
            self._unsynced.add(root)
            self._cached.pop(root, None)

    def sync(self) -> None:
        """Make every appended name durable (before any stream data is)."""
        if not self._unsynced:
            return
        with self._lock:
            for root in sorted(self._unsynced):
                path = self.path(root)
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:  # removed with its family since
                    self._unsynced.discard(root)
                    continue
                except OSError as exc:
                    raise storage_error(path, _SYNCING, exc) from None
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    raise storage_error(path, _SYNCING, exc) from None
                finally:
                    os.close(fd)
                self._unsynced.discard(root)

    @staticmethod
    def write(folder: str, names: list[str]) -> None:
        """Write a whole record into run folder `folder`, durable (its entry too)."""
        path = os.path.join(folder, RECORD)
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _journal.write_all(fd, "".join(f"{n}\n" for n in sorted(names)).encode(), 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _journal.fsync_dir(folder)

    def forget(self, root: str) -> None:
        """Family `root` is being removed: nothing of its record is kept or to sync."""
        with self._lock:
            self._cached.pop(root, None)
            self._unsynced.discard(root)

    @staticmethod
    def start(folder: str) -> None:
        """An empty record for a family being made in `folder` (kept if one is there: a fork
        writes its own first); its entry is made durable with the journal's."""
        fd = os.open(os.path.join(folder, RECORD), os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)


def parse(data: bytes, root: str) -> list[str]:
    """The names of family `root`'s streams in a record's whole lines (a cut may tear the
    last one)."""
    out = []
    for line in data.split(b"\n")[:-1]:
        try:
            name = line.decode("ascii")
        except UnicodeDecodeError:
            continue
        if stream_family(name) == root:
            out.append(name)
    return out


def stream_of(file: str) -> str | None:
    """The stream a file of the streams folder holds (data or index); None: none."""
    stem, dot, ext = file.rpartition(".")
    return stem.replace("%3A", ":") if dot and ext in ("msgpack", "idx") else None


def listed(files: list[str]) -> dict[str, set[str]]:
    """The stream names of each family among file names of the streams folder."""
    out: dict[str, set[str]] = {}
    for file in files:
        if (name := stream_of(file)) is not None and (root := stream_family(name)) is not None:
            out.setdefault(root, set()).add(name)
    return out
