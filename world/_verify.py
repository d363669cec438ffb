"""Checking and safely repairing a `LocalWorld` data directory (what `eve doctor` runs).

`verify(path)` reads every file of the layout without writing and returns one `Finding` per
file. `repair(path)` fixes what can be fixed without losing anything: a torn tail is copied to
the quarantine folder and then truncated; a journal damaged in the middle is copied whole to
the quarantine folder and cut at the damage, so the run stays readable up to it; unreadable
files (a damaged head, a dangling hook, a temporary file left by a crash) are moved there.
Nothing is ever deleted: `quarantine/<stamp>/` mirrors the layout it came from.

Repairs take the same locks the writers take (the family lease for a journal, `inbox.lock`
for an inbox, `flock` on a stream), so a file in use by a live process is left alone and
reported as busy.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import filelock

from . import _journal
from ._errors import CorruptJournalError, StorageError, WorldError
from ._streams import encode_index, index_form, index_offsets

QUARANTINE = "quarantine"
# States that need no action; every other state is a problem `repair` may fix.
OK_STATES = frozenset({"ok", "held"})
# States `repair` can fix; the rest (`corrupt`, `unreadable`) are errors until repaired.
WARNING_STATES = frozenset({"torn", "stale", "leftover", "dangling"})


@dataclass(frozen=True)
class Finding:
    """The state of one file (or, after `repair`, what was done to it)."""

    path: str  # relative to the data directory
    kind: str  # format | journal | inbox | stream | index | head | lock | hook | temp
    state: str  # ok | held | torn | stale | leftover | dangling | corrupt | unreadable |
    #             busy | repaired | quarantined
    detail: str = ""
    offset: int | None = None  # where the damage starts
    size: int = 0
    records: int = 0

    @property
    def ok(self) -> bool:
        return self.state in OK_STATES

    @property
    def error(self) -> bool:
        """Damage that is not recovered on open (a torn tail is; a corrupt record is not)."""
        return self.state in ("corrupt", "unreadable")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- verifying -------------------------------------------------------------------------------------
def verify(path: str | os.PathLike[str]) -> list[Finding]:
    """Check every file under the data directory `path`; writes nothing."""
    root = _data_dir(path)
    findings = [_check_format(root)]
    runs = root / "runs"
    for family in _listdir(runs):
        folder = runs / family
        if not folder.is_dir():
            findings.append(_temp(root, folder))
            continue
        findings.extend(_check_family(root, folder))
    streams = root / "streams"
    for name in _listdir(streams):
        file = streams / name
        if name.endswith(".msgpack"):
            findings.append(_check_log(root, file, "stream"))
            findings.append(_check_index(root, file))
        elif not name.endswith(".idx"):
            findings.append(_temp(root, file))
    hooks = root / "hooks"
    for token in _listdir(hooks):
        findings.append(_check_hook(root, hooks / token))
    return findings


def _data_dir(path: str | os.PathLike[str]) -> Path:
    root = Path(path)
    if not root.is_dir():
        raise WorldError(f"{root}: no data directory there (nothing to check)")
    if not (root / "runs").is_dir() and _check_format(root).state != "ok":
        raise WorldError(f"{root}: not an eve data directory (no eve FORMAT file, no runs/)")
    return root


def _listdir(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except FileNotFoundError:
        return []


def _rel(root: Path, file: Path) -> str:
    return str(file.relative_to(root))


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return 0


def _check_format(root: Path) -> Finding:
    file = root / "FORMAT"
    try:
        found = json.loads(file.read_text())
    except FileNotFoundError:
        return Finding("FORMAT", "format", "stale", "missing; rewritten on the next open")
    except (OSError, ValueError) as exc:
        return Finding("FORMAT", "format", "unreadable", str(exc), size=_size(file))
    if not isinstance(found, dict) or found.get("format") != "eve-world":
        return Finding("FORMAT", "format", "unreadable", "not an eve-world FORMAT file")
    return Finding("FORMAT", "format", "ok", f"version {found.get('version')}", size=_size(file))


def _check_family(root: Path, folder: Path) -> list[Finding]:
    out: list[Finding] = []
    for name in _listdir(folder):
        file = folder / name
        if name == "journal.msgpack":
            out.append(_check_log(root, file, "journal"))
        elif name == "inbox.msgpack":
            out.append(_check_log(root, file, "inbox"))
        elif name == "head.msgpack":
            out.append(_check_head(root, file))
        elif name in ("owner.lock", "inbox.lock"):
            out.append(_check_lock(root, file))
        else:
            out.append(_temp(root, file))
    if not (folder / "journal.msgpack").exists():
        # A crash while creating the run (its journal is written aside, then renamed).
        detail = "run folder without a journal: its creation never finished"
        out.append(Finding(_rel(root, folder), "temp", "leftover", detail))
    return out


def _check_log(root: Path, file: Path, kind: str) -> Finding:
    """A journal, inbox or stream data file: every record checked, damage located."""
    rel, size = _rel(root, file), _size(file)
    try:
        result = _journal.read_file(str(file))
    except CorruptJournalError as exc:
        return Finding(rel, kind, "corrupt", exc.reason, offset=exc.offset, size=size)
    except (StorageError, WorldError, OSError) as exc:
        return Finding(rel, kind, "unreadable", str(exc), offset=0, size=size)
    records = max(len(result.records) - 1, 0)  # the header is not data
    if kind == "journal" and not records:
        # Journals are created whole (written aside, then renamed): no run record = damage.
        return Finding(rel, kind, "unreadable", "no readable run record", offset=0, size=size)
    if result.torn:
        lost = size - result.end
        detail = f"torn tail: {lost} byte(s) after the last complete record"
        return Finding(rel, kind, "torn", detail, offset=result.end, size=size, records=records)
    return Finding(rel, kind, "ok", f"{records} record(s)", size=size, records=records)


def _check_index(root: Path, data: Path) -> Finding:
    idx = data.with_suffix(".idx")
    rel = _rel(root, idx)
    try:
        raw = idx.read_bytes()
        result = _journal.read_file(str(data))
    except FileNotFoundError:
        return Finding(rel, "index", "stale", "missing; rebuilt from the stream on open")
    except (WorldError, OSError):
        return Finding(rel, "index", "stale", "stream unreadable; index not checked")
    expected = [pos for pos, _ in result.records[1:]]
    stored = index_offsets(raw)
    base, width = index_form(raw)
    whole = len(raw) >= base and (len(raw) - base) % width == 0
    if stored == expected and whole:
        return Finding(rel, "index", "ok", f"{len(stored)} item(s)", size=len(raw))
    if stored == expected[: len(stored)] and whole:
        detail = f"{len(expected) - len(stored)} item(s) behind; completed on open"
        return Finding(rel, "index", "stale", detail, size=len(raw))
    return Finding(rel, "index", "stale", "does not match the stream; rebuilt on open")


def _check_head(root: Path, file: Path) -> Finding:
    rel = _rel(root, file)
    rebuilt = "unreadable; a status cache, rebuilt from the journal on open"
    try:
        head = _journal.head_from(file.read_bytes())
    except Exception:  # any damage: the head is a cache rebuilt from the journal
        return Finding(rel, "head", "stale", rebuilt, size=_size(file))
    if head is None:
        return Finding(rel, "head", "stale", rebuilt, size=_size(file))
    return Finding(rel, "head", "ok", f"{len(head.get('runs', {}))} run(s)", size=_size(file))


def lock_held(file: Path) -> bool:
    """Whether a live process holds the `filelock` at `file` right now."""
    if not file.exists():
        return False
    lock = filelock.FileLock(str(file), timeout=0, preserve_lock_file=True)
    try:
        lock.acquire()
    except filelock.Timeout:
        return True
    lock.release()
    return False


def _check_lock(root: Path, file: Path) -> Finding:
    rel = _rel(root, file)
    try:
        held = lock_held(file)
    except OSError as exc:
        return Finding(rel, "lock", "unreadable", exc.strerror or str(exc))
    if held:
        return Finding(rel, "lock", "held", "owned by a live process")
    return Finding(rel, "lock", "ok", "free")


def _check_hook(root: Path, file: Path) -> Finding:
    rel = _rel(root, file)
    try:
        owner = file.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        return Finding(rel, "hook", "unreadable", str(exc), size=_size(file))
    if not owner:
        return Finding(rel, "hook", "leftover", "empty: its claimer died mid-claim")
    family = owner.split(".", 1)[0]
    if "/" in family or not (root / "runs" / family / "journal.msgpack").exists():
        return Finding(rel, "hook", "dangling", f"names run {owner!r}, which does not exist")
    return Finding(rel, "hook", "ok", f"run {owner}", size=_size(file))


def _temp(root: Path, file: Path) -> Finding:
    return Finding(_rel(root, file), "temp", "leftover", "not part of the layout", size=_size(file))


# -- repairing -------------------------------------------------------------------------------------
def repair(path: str | os.PathLike[str]) -> list[Finding]:
    """Fix every finding of `verify` that is not ok; return what was done, file by file."""
    root = _data_dir(path)
    bin_ = _Quarantine(root)
    done: list[Finding] = []
    for found in verify(root):
        if found.ok or found.kind in ("format", "lock"):
            continue  # FORMAT is rewritten on open; locks need nothing
        file = root / found.path
        try:
            with _guard_for(root, found):
                done.append(_repair_one(root, bin_, found, file))
        except filelock.Timeout:
            done.append(_replace(found, "busy", "in use by a live process; not repaired"))
        except OSError as exc:
            done.append(_replace(found, "unreadable", f"repair failed: {exc}"))
    return done


def _replace(found: Finding, state: str, detail: str) -> Finding:
    return Finding(found.path, found.kind, state, detail, found.offset, found.size, found.records)


@contextlib.contextmanager
def _guard_for(root: Path, found: Finding) -> Iterator[None]:
    """Hold the lock writers of this file hold (the family lease, inbox.lock, a stream flock)."""
    parts = Path(found.path).parts
    if parts[0] == "runs" and len(parts) >= 2 and found.kind in ("journal", "inbox", "head"):
        name = "inbox.lock" if found.kind == "inbox" else "owner.lock"
        lock = filelock.FileLock(
            str(root / "runs" / parts[1] / name), timeout=0, preserve_lock_file=True
        )
        if not (root / "runs" / parts[1]).is_dir():
            yield
            return
        with lock:
            yield
        return
    if found.kind in ("stream", "index"):
        fd = os.open(root / Path(found.path).with_suffix(".msgpack"), os.O_RDWR)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise filelock.Timeout(str(root / found.path)) from None
            yield
        finally:
            os.close(fd)  # closing releases the flock
        return
    yield


def _repair_one(root: Path, bin_: _Quarantine, found: Finding, file: Path) -> Finding:
    if found.kind in ("journal", "inbox", "stream") and found.state in ("torn", "corrupt"):
        return _cut(root, bin_, found, file)
    if found.kind == "index":
        count = _write_index(file.with_suffix(".msgpack"))
        return _replace(found, "repaired", f"rebuilt from the stream ({count} item(s))")
    if found.kind == "journal" and file.name == "journal.msgpack":
        # The journal is the run: without a readable one the whole family goes, together.
        where = bin_.move(file.parent)
        return _replace(found, "quarantined", f"no readable run; folder moved to {where}")
    where = bin_.move(file)  # a damaged head, a dangling hook, a leftover, a journal-less run
    return _replace(found, "quarantined", f"moved to {where}")


def _cut(root: Path, bin_: _Quarantine, found: Finding, file: Path) -> Finding:
    """Keep the valid prefix in place; keep every other byte in the quarantine folder."""
    fresh = _check_log(root, file, found.kind)  # under the lock now: the state may have moved
    if fresh.state not in ("torn", "corrupt") or fresh.offset is None:
        return _replace(fresh, fresh.state, "nothing to repair any more")
    offset = fresh.offset
    valid = _journal.parse(file.read_bytes()[:offset], 0, str(file)).records if offset else []
    if found.kind == "journal" and len(valid) < 2:
        # Nothing but the header survives: without its start record the run cannot be read.
        where = bin_.move(file.parent)
        return _replace(fresh, "quarantined", f"no readable run left; folder moved to {where}")
    if fresh.state == "torn":
        where = bin_.copy_tail(file, offset)
        what = f"torn tail cut at offset {offset}; its bytes kept in {where}"
    else:
        where = bin_.copy_whole(file)
        what = f"cut at the damage (offset {offset}); the whole file kept in {where}"
    with open(file, "r+b") as f:
        f.truncate(offset)
        os.fsync(f.fileno())
    if found.kind == "stream":
        _write_index(file)
    return Finding(fresh.path, fresh.kind, "repaired", what, offset, fresh.size, len(valid) - 1)


def _write_index(data: Path) -> int:
    """Rewrite a stream's index (a cache of item offsets) from its data file."""
    offsets = [pos for pos, _ in _journal.read_file(str(data)).records[1:]]
    idx = data.with_suffix(".idx")
    tmp = idx.with_name(idx.name + f".tmp{os.getpid()}")
    try:  # in the form it has: a writer holding it open goes on in that form
        width = index_form(idx.read_bytes()[:8])[1]
    except FileNotFoundError:
        width = 4
    tmp.write_bytes(encode_index(offsets, width))
    os.replace(tmp, idx)
    return len(offsets)


class _Quarantine:
    """`quarantine/<stamp>/` under the data directory, created on first use."""

    def __init__(self, root: Path) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.root = root
        self.path = root / QUARANTINE / f"{stamp}-{os.getpid()}"

    def _target(self, file: Path, suffix: str = "") -> Path:
        target = self.path / (str(file.relative_to(self.root)) + suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def move(self, file: Path) -> str:
        target = self._target(file)
        os.replace(file, target)
        return _rel(self.root, target)

    def copy_whole(self, file: Path) -> str:
        target = self._target(file)
        shutil.copyfile(file, target)
        _fsync(target)
        return _rel(self.root, target)

    def copy_tail(self, file: Path, offset: int) -> str:
        target = self._target(file, f".tail-{offset}")
        with open(file, "rb") as src:
            src.seek(offset)
            target.write_bytes(src.read())
        _fsync(target)
        return _rel(self.root, target)


def _fsync(file: Path) -> None:
    fd = os.open(file, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
