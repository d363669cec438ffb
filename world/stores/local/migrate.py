"""Store migrations: numbered, named, run once when a data directory is opened (SPEC §3, D9).

`MIGRATIONS` maps each store format to the function that brings a store of the format before it
there (`m002_frozen_forms`: format 1, the pre-release forms, to 2, the frozen ones;
`m003_write_ahead_files`: 2 to 3, no file rewritten). A store several formats behind goes
through each in turn in one migration (one commit); a step after one that rewrites a family's
files must read them as staged (none does: 3 rewrites nothing). A user of
the world whose payloads the world cannot read (eve's session snapshots, its step results)
registers a `MigrationStep` for the format it migrates to; the world hands it every journal
record on the way, whole, before it stores the record in the new form.

Crash safety: every rewritten file is written whole under `.migrating/` and fsync'd; a
`COMMITTED` file there (fsync'd, with its directory) is the commit point; then each file is
renamed over the one it replaces, and FORMAT is written last. An open that finds `.migrating/`
without `COMMITTED` removes it (the store is the old one, untouched); with it, it finishes the
renames (each is idempotent: a file moved is no longer staged). A kill at any moment leaves
the old store or the new one. The whole migration runs under `migrate.lock` and every
family's `owner.lock` and `inbox.lock`: no process writes the store meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import filelock

from ... import _codec, _faults, _journal
from ..._errors import CorruptJournalError, StoreFormatError
from ..._family import GAP, START_TYPES, Family, build_head
from ..._migrations import MigrationReport, MigrationStep, migrating_record, steps_for
from ..._records import JournalRecord, StoredRecord
from ..._world import InboxItem, inbox_item, inbox_record

if TYPE_CHECKING:
    from ..._world import World

# The oldest format whose files are the current format's (every later step rewrites none): a
# reader (`LocalWorld(create=False)`) reads a store of it as it is, and writes nothing.
SAME_FILES_SINCE = 2
STAGING = ".migrating"
COMMITTED = "COMMITTED"
LOCK = "migrate.lock"
_FILES = ("journal.msgpack", "inbox.msgpack", "head.msgpack")


@dataclass
class _Staged:
    """The new files of one family, as bytes (written under `.migrating/<root>/`)."""

    root: str
    journal: bytes
    inbox: bytes | None
    head: bytes


def migrate_store(
    world: World,
    path: Path,
    found: int,
    *,
    dry_run: bool = False,
    before: Callable[[], None] | None = None,
) -> MigrationReport | None:
    """Bring the store at `path` (FORMAT says `found`) to the current format; under its locks.
    `before` runs before the commit (makes what the steps appended durable). Returns what was
    done; None when another process migrated it meanwhile (or finishes doing so here)."""
    from .layout import FORMAT_VERSION

    report = MigrationReport(str(path), found, FORMAT_VERSION, dry_run)
    with _store_lock(path, dry_run):
        staging = path / STAGING
        if not dry_run and staging.is_dir():
            if (staging / COMMITTED).exists():
                report.families, report.resumed = _roll_forward(path), True
                return report
            shutil.rmtree(staging)  # cut short before its commit: the store is the old one
        version = format_version(path)
        if version is None or version >= FORMAT_VERSION:
            return None
        report.from_version = version
        roots = sorted(p.name for p in (path / "runs").iterdir() if p.is_dir())
        with (
            _open_files_for(path, 0 if dry_run else 2 * len(roots)),
            _family_locks(path, roots, dry_run),
        ):
            staged = _stage_all(world, path, roots, report, dry_run)
            report.families = len(roots)
            report.steps = [
                s.name for to in range(version + 1, FORMAT_VERSION + 1) for s in steps_for(to)
            ]
            if dry_run:
                return report
            if before is not None:
                before()
            _commit(staging, [s.root for s in staged])
            _faults.migrate_point("committed", 1)
            _roll_forward(path)
    return report


def _stage_all(
    world: World, path: Path, roots: list[str], report: MigrationReport, dry_run: bool
) -> list[_Staged]:
    """Each family through every step from the report's format to the current one; the
    files a step rewrote are staged (written under `.migrating/`) unless `dry_run`."""
    from .layout import FORMAT_VERSION

    staged = []
    for n, root in enumerate(roots, 1):
        for to in range(report.from_version + 1, FORMAT_VERSION + 1):
            made = MIGRATIONS[to](world, path, root, report)
            if made is not None:
                staged.append(made)
                if not dry_run:
                    _stage(path / STAGING, made)
        if not dry_run:
            _faults.migrate_point("staged", n)
    return staged


def finish_interrupted(path: Path) -> None:
    """After a migration cut short past its commit and a FORMAT already current: remove what
    is left of `.migrating/` (under the lock)."""
    with _store_lock(path, False):
        staging = path / STAGING
        if (staging / COMMITTED).exists():
            _roll_forward(path)
        elif staging.is_dir():
            shutil.rmtree(staging)


def format_version(path: Path) -> int | None:
    """The format of the store at `path`, as its FORMAT says; None when FORMAT is missing or
    damaged (`_format.read_format`: a version its files contradict is not one to migrate)."""
    from .layout import read_format

    with contextlib.suppress(OSError):
        return read_format(path).version
    return None


@contextlib.contextmanager
def _store_lock(path: Path, dry_run: bool) -> Iterator[None]:
    if dry_run:
        yield
        return
    lock = filelock.FileLock(str(path / LOCK), timeout=60, preserve_lock_file=True)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise StoreFormatError(
            f"{path}: another process has been migrating this store for a minute; try again"
        ) from None
    try:
        yield
    finally:
        lock.release()


FILES_BESIDE_LOCKS = 256  # files a migration may open besides its locks (and the process's)


@contextlib.contextmanager
def _open_files_for(path: Path, locks: int) -> Iterator[None]:
    """Room for `locks` more open files while the migration runs: each family's two locks
    are held until its commit (10,000 sessions: 20,000 files), more than the usual limit
    of 1,024. The soft limit is raised as far as the hard one allows, and put back after;
    a hard limit too low is one clear error before anything is changed."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = locks + _open_now() + FILES_BESIDE_LOCKS
    if locks == 0 or soft == resource.RLIM_INFINITY or soft >= needed:
        yield
        return
    room = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    if room < needed:
        raise StoreFormatError(
            f"{path}: migrating its {locks // 2} sessions to the current format holds "
            f"{locks} file locks at once, and this process may open only {hard} files; "
            f"raise the limit to at least {needed} (`ulimit -n {needed}`) and open the "
            "store again (nothing was changed)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (room, hard))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError, OSError):  # files still open: left raised
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _open_now() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64  # no /proc: a guess at what a process has open


@contextlib.contextmanager
def _family_locks(path: Path, roots: list[str], dry_run: bool) -> Iterator[None]:
    """Every family's `owner.lock` and `inbox.lock`, taken without waiting: a store an older
    eve is running is not migrated under it."""
    held: list[filelock.BaseFileLock] = []
    try:
        for root in [] if dry_run else roots:
            for name in ("owner.lock", "inbox.lock"):
                lock: filelock.BaseFileLock = filelock.FileLock(
                    str(path / "runs" / root / name), timeout=0, preserve_lock_file=True
                )
                try:
                    lock.acquire()
                except filelock.Timeout:
                    raise StoreFormatError(
                        f"{path / 'runs' / root}: in use by another process (the version "
                        "that wrote this store?); stop it, then open the store again to "
                        "migrate it"
                    ) from None
                held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            lock.release()


def _write_synced(file: Path, data: bytes) -> None:
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _journal.write_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def _stage(staging: Path, staged: _Staged) -> None:
    folder = staging / staged.root
    folder.mkdir(parents=True, exist_ok=True)
    _write_synced(folder / "journal.msgpack", staged.journal)
    if staged.inbox is not None:
        _write_synced(folder / "inbox.msgpack", staged.inbox)
    _write_synced(folder / "head.msgpack", staged.head)
    _journal.fsync_dir(folder)
    _journal.fsync_dir(staging)


def _commit(staging: Path, roots: list[str]) -> None:
    """The commit point: `COMMITTED` appears whole (renamed into place) or not at all."""
    staging.mkdir(exist_ok=True)
    tmp = staging / f"{COMMITTED}.tmp"
    _write_synced(tmp, (json.dumps({"families": roots}) + "\n").encode())
    os.replace(tmp, staging / COMMITTED)
    _journal.fsync_dir(staging)


def _roll_forward(path: Path) -> int:
    """Move every staged file over the one it replaces, then write FORMAT, then remove the
    staging folder; each part may be cut and done again. Returns the number of families."""
    from .layout import format_text, store_id

    staging = path / STAGING
    roots = json.loads((staging / COMMITTED).read_text())["families"]
    for n, root in enumerate(roots, 1):
        folder, moved = path / "runs" / root, False
        for name in _FILES:
            staged = staging / root / name
            if staged.exists():
                os.replace(staged, folder / name)
                moved = True
        if moved:
            _journal.fsync_dir(folder)
            _faults.migrate_point("moved", n)
    fmt = path / "FORMAT"
    tmp = fmt.with_suffix(f".tmp{os.getpid()}")
    _write_synced(tmp, format_text(store_id(path)))  # the store keeps its id
    os.replace(tmp, fmt)
    _journal.fsync_dir(path)
    shutil.rmtree(staging)
    _journal.fsync_dir(path)
    return len(roots)


# -- 1 -> 2 ------------------------------------------------------------------------------------


def m002_frozen_forms(world: World, path: Path, root: str, report: MigrationReport) -> _Staged:
    """Format 1 -> 2 for one family: its journal (any record version 1-5: whole records,
    `child_done`, the older compact forms) rewritten in the current compact form with the
    registered steps applied, its inbox's version-1 deliveries in the current form (their ids,
    which are file offsets, renumbered in the journal), and a head built from the result."""
    folder = path / "runs" / root
    old_items, new_items, ids, inbox = _m002_inbox(folder / "inbox.msgpack", report)
    end = _inbox_end(inbox)
    old, new = Family(root), Family(root)
    old.items = {item.id: item for item in old_items}
    new.items = {item.id: item for item in new_items}
    steps, notes = steps_for(2), dict[str, Any]()
    out = bytearray(_journal.frame(_journal.header()))
    journal = folder / "journal.msgpack"
    read = _journal.parse(journal.read_bytes(), 0, str(journal))
    _check_journal_header(journal, read)
    for pos, stored in cast("list[tuple[int, StoredRecord]]", read.records[1:]):
        rec = old.apply(pos, stored)
        if rec.get("t") == "child_done":  # a parent reads a child's end from the child now
            report.dropped += 1
            continue
        if rec.get("t") != GAP and "run" in rec:
            migrated = _m002_record(world, root, rec, (ids, end), new, notes, steps, report)
            if migrated is None:
                continue
            rec = migrated
        packed = _packed(new, rec)
        at = len(out)
        out += _journal.frame_body(_codec.encode(packed, "record"))
        new.apply(at, packed)
        report.records += 1
    new.end = len(out)
    new.inbox_next = new.inbox_mark = end
    return _Staged(root, bytes(out), inbox, _journal.frame(build_head(new), "head"))


def _check_journal_header(journal: Path, read: _journal.ReadResult) -> None:
    first = read.records[0][1] if read.records else {}
    version = first.get("version")
    if first.get("t") != "header" or not isinstance(version, int) or version > 5:
        raise StoreFormatError(f"{journal}: not a journal of store format 1; nothing was changed")


def _m002_record(
    world: World,
    root: str,
    rec: JournalRecord,
    inbox: tuple[dict[int, int] | None, int],
    new: Family,
    notes: dict[str, Any],
    steps: list[MigrationStep],
    report: MigrationReport,
) -> JournalRecord | None:
    if "lost" in rec:
        raise CorruptJournalError(
            f"journal of run family {root}",
            0,
            "missing delivery",
            what="a received delivery is missing from the inbox: the family cannot be migrated",
        )
    kind, (ids, end) = rec["t"], inbox
    if ids is None:
        pass  # the inbox is kept as it is: its ids stay
    elif kind == "recv":
        rec["ids"] = [ids[i] for i in rec["ids"]]
    elif kind in START_TYPES and isinstance(rec.get("inbox"), dict):
        rec["inbox"] = {
            "w": _renumber_mark(rec["inbox"]["w"], ids, end),
            "x": [ids[i] for i in rec["inbox"].get("x", []) if i in ids],
        }
    migrating = migrating_record(world, root, rec, new, notes, dry_run=report.dry_run)
    for step in steps:
        step.record(migrating)
        if migrating.dropped:
            report.dropped += 1
            return None
    return migrating.record


def _packed(new: Family, rec: JournalRecord) -> StoredRecord:
    """`rec` in the form the journal stores (whole when its run's start is not in the journal,
    as a fork stores records: a damaged family is migrated as it reads)."""
    if rec.get("t") == GAP or "run" not in rec:
        return cast(StoredRecord, rec)
    run = new.runs.get(rec["run"])
    if rec["t"] not in START_TYPES and run is None:
        return cast(StoredRecord, rec)
    return new.pack(rec, run.gen_at if run is not None else 0.0)


def _m002_inbox(
    path: Path, report: MigrationReport
) -> tuple[list[InboxItem], list[InboxItem], dict[int, int] | None, bytes | None]:
    """The deliveries of an inbox as its writer stored them (version 1 `{t: item, ...}` or
    current `{k, p, a}`), the same in the rewritten file, the new id of each old one, and
    that file (None: there is none); the ids are None when the inbox is kept as it is."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], [], None, None
    read = _journal.parse(data, 0, str(path))
    header = read.records[0][1] if read.records else {}
    if header.get("t") != "header":
        raise StoreFormatError(f"{path}: not an inbox of store format 1; nothing was changed")
    if header.get("version") == _journal.INBOX_VERSION:  # already current: kept as it is
        shift = _journal.inbox_layout(data[: _journal.HEADER_MAX])[0]
        items = [
            item
            for (pos, rec), crc in zip(read.records[1:], read.crcs[1:], strict=True)
            if (item := inbox_item(pos + shift, rec, crc)) is not None
        ]
        return items, items, None, data[: read.end]
    out = bytearray(_journal.frame(_journal.header(_journal.INBOX_FORMAT)))
    old_items, new_items, ids = [], [], {}
    for (pos, rec), crc in zip(read.records[1:], read.crcs[1:], strict=True):
        item = _old_item(pos, rec, crc)
        if item is None:
            continue
        body = _codec.encode(inbox_record(item.token, item.payload, item.at), "delivery")
        ids[pos] = len(out)
        new_items.append(InboxItem(len(out), item.token, item.payload, item.at, zlib.crc32(body)))
        out += _journal.frame_body(body)
        old_items.append(item)
        report.deliveries += rec.get("t") == "item"
    return old_items, new_items, ids, bytes(out)


def _old_item(pos: int, rec: dict[str, Any], crc: int) -> InboxItem | None:
    """A delivery of inbox item version 1 (`{t: item, token, payload, at}`) or 2 (current)."""
    if rec.get("t") == "item":
        return InboxItem(pos, rec["token"], rec.get("payload"), rec.get("at", 0.0), crc)
    return inbox_item(pos, rec, crc)


def _renumber_mark(mark: int, ids: dict[int, int], end: int) -> int:
    """A watermark (every id below it consumed) in the rewritten inbox's ids (`end`: its end)."""
    return min((new for old, new in ids.items() if old >= mark), default=end)


def _inbox_end(inbox: bytes | None) -> int:
    if inbox is None:
        return 0
    return len(inbox) + _journal.inbox_layout(inbox[: _journal.HEADER_MAX])[0]


# -- 2 -> 3 ------------------------------------------------------------------------------------


def m003_write_ahead_files(
    world: World, path: Path, root: str, report: MigrationReport
) -> _Staged | None:
    """Format 2 -> 3 for one family: nothing is rewritten. Format 3 says a family's write-ahead
    file (`wal`) may hold commits its journal and stream files do not have yet (a kill or a
    cut after the commit): an eve that does not replay them (one that knows only format 2)
    refuses the store instead of reading it as after a power cut and losing them. What a
    format-2 store's write-ahead files hold is replayed as ever, at the family's next lease."""
    return None


MIGRATIONS: dict[int, Callable[[World, Path, str, MigrationReport], _Staged | None]] = {
    2: m002_frozen_forms,
    3: m003_write_ahead_files,
}
