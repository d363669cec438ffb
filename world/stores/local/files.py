"""The files of a `LocalWorld` data directory: guarded reads, listings, names (see `layout`)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ... import _faults, _journal
from ..._errors import CorruptJournalError, RunExistsError, StorageError, storage_error
from ..._world import check_run_id, root_of, stream_family
from .stream_record import stream_of

STREAM_SUFFIX = ".msgpack"
HEAD_READ = 1 << 16  # a head's first read (most are ~1 KB; a longer one is read on)
# The key of a head under which a LocalWorld notes how far it checked the family's files.
INTACT_KEY = "_intact"
REMOVE_WAIT = 5.0  # seconds `remove_family` waits for a delivery in progress to finish
RUN_FILES = ("journal.msgpack", "inbox.msgpack", "head.msgpack")  # a family's data files
LOCKS = ("owner.lock", "inbox.lock")  # removed last: a waiter on them then finds no journal
WAL = "wal.msgpack"  # a family's write-ahead file (`wal.NAME`)


@contextlib.contextmanager
def guard(path: Path | str, doing: str) -> Iterator[None]:
    """Turn what the disk refuses (permissions, no space, I/O errors) into one clear error
    naming the path."""
    try:
        yield
    except PermissionError:
        raise StorageError(
            f"{path}: permission denied while {doing}; check the owner and mode of the "
            "data directory (or choose another with --data / EVE_DATA_DIR)"
        ) from None
    except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError):
        raise
    except OSError as exc:
        raise storage_error(exc.filename or path, doing, exc) from None


def listdir(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []


def read_from(path: str, start: int, size: int = -1) -> tuple[os.stat_result, bytes]:
    """File `path`'s status and its bytes from `start` on (`size` of them; -1: to its end),
    read without a buffered file object (checks and inbox ends read ~10 files a turn).
    Raises FileNotFoundError."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        return st, os.pread(fd, max(st.st_size - start, 0) if size < 0 else size, start)
    finally:
        os.close(fd)


def read_whole(path: str) -> bytes:
    """A small file's bytes, read without a buffered file object (half the time of
    `open(...).read()` for a head of ~1 KB: a listing reads 10,000)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, HEAD_READ)
        if len(data) < HEAD_READ:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


class Listing:
    """A directory's entries grouped by family, listed again only when the directory changed
    (its inode or mtime): `remove_family` and `family_usage` ask once per family, and a
    listing of every stream for each would be quadratic. With ``by_name`` (an entry's name
    holds its family's id, as a stream's does) the first few families asked about after a
    change are found by their id in the names, not by grouping every entry: a process that
    wakes one of 10,000 parked sessions asks about one."""

    GROUP_AFTER = 8  # families asked about, at one listing, before every entry is grouped

    def __init__(
        self, folder: Path, group: Callable[[Path, str], str | None], *, by_name: bool = False
    ) -> None:
        self._folder, self._group, self._by_name = folder, group, by_name
        self._stamp: tuple[int, int] | None = None
        self._by_root: dict[str, list[str]] = {}
        self._names_stamp: tuple[int, int] | None = None
        self._names: list[str] = []
        self._asked = 0

    def stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self._folder)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    def _listed(self, stamp: tuple[int, int]) -> list[str]:
        if stamp != self._names_stamp:
            self._names, self._names_stamp, self._asked = os.listdir(self._folder), stamp, 0
        return self._names

    def get(self) -> dict[str, list[str]]:
        stamp = self.stamp()
        if stamp is None:
            return {}
        if stamp != self._stamp:
            by_root: dict[str, list[str]] = {}
            for name in sorted(self._listed(stamp)):
                root = self._group(self._folder, name)
                if root is not None:
                    by_root.setdefault(root, []).append(name)
            self._stamp, self._by_root = stamp, by_root
        return self._by_root

    def of(self, root: str) -> list[str]:
        """The entries of family `root` (sorted)."""
        stamp = self.stamp()
        if stamp is None:
            return []
        if stamp == self._stamp or not self._by_name:
            return self.get().get(root, [])
        names = self._listed(stamp)
        self._asked += 1
        if self._asked > self.GROUP_AFTER:
            return self.get().get(root, [])
        group, folder = self._group, self._folder
        return sorted(n for n in names if root in n and group(folder, n) == root)

    def dropped(self, root: str, before: tuple[int, int] | None) -> None:
        """This process removed `root`'s entries: keep the listing if nothing else changed
        the directory since it was made (`before`: its stamp just before the removal)."""
        if before is not None and before == self._stamp:
            self._by_root.pop(root, None)
            self._stamp = self.stamp()
        self._names_stamp = None  # listed again when next asked (removals are rare)


def place_once(tmp: Path, path: Path, what: str) -> None:
    """Put the written file ``tmp`` in place as ``path`` unless ``path`` exists (an empty one
    counts as absent; `RunExistsError` naming ``what``). A link, not a rename: of two
    processes placing one file at once, exactly one succeeds (a rename lets the second replace
    the first's). ``tmp`` is gone afterwards, and so are the ``path.tmp*`` a process killed
    before placing left."""
    try:
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size == 0:
                path.unlink()
        os.link(tmp, path)
    except (FileExistsError, FileNotFoundError):  # (the winner removed ``tmp`` as a leftover)
        raise RunExistsError(f"{what} already exists") from None
    finally:
        tmp.unlink(missing_ok=True)
    for stale in path.parent.glob(path.name + ".tmp*"):  # another one is a loser's or dead
        stale.unlink(missing_ok=True)


def stream_root(folder: Path, name: str) -> str | None:
    stream = stream_of(name)
    return stream_family(stream) if stream is not None else None


def hook_root(folder: Path, name: str) -> str | None:
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            owner = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None  # `eve doctor` reports it
    return root_of(owner) if owner else None


def compact_inbox_file(path: Path, tmp: Path, keep_from: int, least: int) -> int | None:
    """Under `inbox.lock`: compact if worth it; the inbox's end (an id) if it did."""
    try:
        data = path.read_bytes()
        shift, header_end = _journal.inbox_layout(data)
        cut = keep_from - shift
        if not header_end or cut > len(data) or cut - header_end < max(least, len(data) - cut):
            return None
        if _journal.parse(data[cut:], cut, str(path)).torn:
            return None  # a torn tail is the next delivery's to drop
        header = {**_journal.header(_journal.INBOX_FORMAT), "base": keep_from}
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _journal.write_all(fd, _journal.frame(header) + data[cut:], 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        if _faults.ACTIVE:
            _faults.compact_point("written")
        os.replace(tmp, path)
        if _faults.ACTIVE:
            _faults.compact_point("renamed")
        _journal.fsync_dir(path.parent)
    except (CorruptJournalError, OSError):
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None  # the inbox stays as it was (or, renamed, holds the same ids)
    return shift + len(data)


def read_head_file(path: str) -> dict[str, Any] | None:
    """A head file's head (None: missing, unreadable or damaged: rebuilt from the journal)."""
    for _ in range(3):  # a damaged head may be one being written: read it again
        try:
            head = _journal.head_from(read_whole(path))
        except OSError:  # missing or unreadable: rebuilt (head_from says None for damage)
            return None
        if head is not None:
            return head
    return None


def remove_run_folder(folder: Path) -> None:
    """A run folder's data, then its journal and lock files, then the folder: a crash at any
    point leaves a family still listed, or a remnant."""
    last = ["journal.msgpack", *LOCKS]
    for name in listdir(folder):
        if name not in last:
            delete(folder / name)
    for name in last:
        (folder / name).unlink(missing_ok=True)
    with contextlib.suppress(FileNotFoundError):
        folder.rmdir()


def usage_of(paths: list[str]) -> tuple[int, float]:
    """The bytes `paths` hold and their latest change (locks left out: a lock's mtime is its
    taking, not a write; a write-ahead file's is its emptying, which changes no data)."""
    size, last = 0, 0.0
    for path in paths:
        if path.endswith(".lock"):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        size += st.st_size
        if not path.endswith(WAL):
            last = max(last, st.st_mtime)
    return size, last


class RunFiles:
    """(folder, journal, inbox) of each family, as strings: asked for several times a turn,
    and a `Path` costs more to build than the system call it is for."""

    def __init__(self, path: Path) -> None:
        self.runs = os.path.join(path, "runs")
        self.known: dict[str, tuple[str, str, str]] = {}

    def of(self, root: str) -> tuple[str, str, str]:
        files = self.known.get(root)
        if files is None:
            folder = os.path.join(self.runs, check_run_id(root))
            files = (
                folder,
                os.path.join(folder, "journal.msgpack"),
                os.path.join(folder, "inbox.msgpack"),
            )
            if len(self.known) >= 4096:
                self.known.clear()
            self.known[root] = files
        return files

    def forget(self, root: str) -> None:
        self.known.pop(root, None)

    def clear(self) -> None:
        self.known.clear()
