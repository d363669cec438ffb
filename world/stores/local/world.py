"""`LocalWorld`: the world as files under one data directory (default `./.workflow-data`;
the layout is in `layout`). Files grow with run families, never with steps. Readers take no
lock."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import time
from collections.abc import AsyncIterator, Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ... import _journal
from ..._commit import CommitQueue
from ..._errors import (
    CorruptJournalError,
    HookConflictError,
    OwnershipError,
    RunExistsError,
    RunNotFoundError,
    StorageError,
)
from ..._family import parks_on_timer
from ..._migrations import MigrationReport
from ..._records import StoredRecord
from ..._store import IO, RECORD, Order, Store
from ..._world import (
    FamilyHead,
    FamilyLog,
    FamilyUsage,
    InboxItem,
    Lease,
    check_run_id,
    inbox_record,
)
from . import migrate as _migrate
from . import wal as _wal
from .commits import FamilyCommits, Recovery, empty_durably
from .files import (
    INTACT_KEY,
    REMOVE_WAIT,
    STREAM_SUFFIX,
    Listing,
    RunFiles,
    compact_inbox_file,
    guard,
    hook_root,
    listdir,
    place_once,
    read_head_file,
    remove_run_folder,
    stream_root,
    usage_of,
)
from .hooks import HookFiles
from .inbox import InboxEnds, read_inbox_file
from .intact import CheckedFiles
from .layout import FORMAT_VERSION, default_data_dir, old_format_error, open_format
from .stream_record import StreamRecords
from .streams import StreamStore
from .timers import TimerNotes
from .watch import DirWatcher, touched

if TYPE_CHECKING:
    from ..._findings import Finding

# An inbox is compacted once its consumed deliveries take this much (and more than the rest).
COMPACT_MIN = 16 * 1024
_fsync_dir = _journal.fsync_dir
make_dirs = _journal.make_dirs


class _FileLease(Lease):
    def __init__(self, world: LocalWorld, root: str, lock: int) -> None:
        self._world, self._root, self._lock = world, root, lock  # `owner.lock`, flock'd

    def release(self) -> None:
        world = self._world
        try:
            world._families.release(self._root)  # a checkpoint: may raise what the disk refused
        finally:
            world._leased.discard(self._root)
            writer = world._writers.pop(self._root, None)
            try:
                if writer is not None:
                    writer.close()
            finally:
                _unlock(self._lock)


# Seconds the records and stream items before an effect no one observes (a model's request)
# wait for the next effect, which makes them durable and readable with its own in one go.
EFFECT_WAIT = 0.002


def _asyncio_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


class LocalWorld(Store):
    """Durable storage in files; the default world."""

    io = IO.DISK  # fsync: see Store.io

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        check: bool = True,
    ) -> None:
        """Open the data directory `path` (default: `default_data_dir()`).

        Opening an existing directory writes nothing; a missing one is created unless
        `create` is False, in which case it reads as empty (for read-only tools).
        `check=False` (with `create=False`) opens even a directory whose FORMAT file is bad,
        for `verify` and `repair`, which report it.
        """
        self.path = Path(path) if path is not None else default_data_dir()
        self._create = create
        self._writers: dict[str, _journal.Writer] = {}
        self._run_files = RunFiles(self.path)
        self._runs_resolved = os.path.join(os.path.realpath(self.path), "runs")  # as watched
        self._timers = TimerNotes(self.path, create=create)
        # The families whose writer holds a deferred fdatasync, and when they commit.
        self._commits = CommitQueue(self._commit_family, EFFECT_WAIT)
        self._leased: set[str] = set()
        self._inboxes = InboxEnds(self.path / "runs")
        self._checks = CheckedFiles(len(os.path.join(self.path, "")))
        self._streams_folder = os.path.join(self.path, "streams")
        self._streams = StreamStore(self.path / "streams")
        self._streams.before_write = self._settle  # readers see no item before its record
        self._streams.after_write = self._checks.wrote
        self._records = StreamRecords(os.path.join(self.path, "runs"))
        self._streams.before_open = self._records.note
        self._streams.before_durable = self._records.sync
        # How a leased family's commit is made durable: its write-ahead file (`wal`).
        self._families = FamilyCommits(
            self._writer, self._streams, self._checks.wrote, self._records.sync
        )
        self._streams.held = self._families.holds
        self._streams.commit_families = self._families.commit_many
        self._recovery = Recovery(self._run_files, self.path / "streams", self._leased, create)
        # A reader's open writes nothing: it reads the files with what a crash left in their
        # write-ahead files applied in memory (`wal.View`); a writer replays those first.
        streams = str(self.path / "streams")
        self._view = None if create else _wal.View(self._run_files.runs, streams, self._leased)
        if self._view is not None:
            self._streams.overlay = self._view.stream
        else:
            self._streams.before_read = self._recovery.stream
        self._stream_files = Listing(self.path / "streams", stream_root, by_name=True)
        self._hook_files = Listing(self.path / "hooks", hook_root)
        self._hooks = HookFiles(
            self.path / "hooks",
            self._streams.flush,
            lambda root: os.path.exists(self._run_files.of(root)[1]),
        )
        # What the open migrated (`_migrate`): None unless the store was of an older format.
        self.migration: MigrationReport | None = None
        if check or create:
            self._check_format()

    def _check_format(self) -> None:
        older = open_format(self.path, create=self._create)
        if older is not None and (self._create or older < _migrate.SAME_FILES_SINCE):
            self.migration = self._migrate_from(older)
        elif os.path.exists(os.path.join(self.path, _migrate.STAGING)):
            _migrate.finish_interrupted(self.path)  # cut after its FORMAT was written

    def _migrate_from(self, version: int) -> MigrationReport | None:
        """Migrate this store from format `version` (`_migrate`); its streams' appends, which
        a migration step may make, are durable before the migration commits."""
        if version not in range(1, FORMAT_VERSION):
            raise old_format_error(self.path / "FORMAT", version)
        with guard(self.path, "migrating the data directory"):
            report = _migrate.migrate_store(self, self.path, version, before=self._streams.flush)
        self._run_files.clear()
        return report

    def plan_migration(self) -> MigrationReport | None:
        """What opening this store would migrate (nothing is written); None: nothing (the
        store is in the current format). For a store opened with `check=False`."""
        found = _migrate.format_version(self.path)
        if found is None or found >= FORMAT_VERSION:
            return None
        return _migrate.migrate_store(self, self.path, found, dry_run=True)

    def _dir(self, root: str) -> Path:
        return self.path / "runs" / check_run_id(root)

    def _journal_path(self, root: str) -> str:
        path = self._run_files.of(root)[1]
        if not os.path.exists(path):
            raise RunNotFoundError(f"no run family {root!r} in {self.path}")
        return path

    # -- families ----------------------------------------------------------------------------
    def create_family(
        self,
        root: str,
        bodies: list[bytes],
        *,
        streams: Mapping[str, tuple[str, int]] | None = None,
        hooks: Mapping[str, str] | None = None,
    ) -> list[int]:
        if streams is not None or hooks is not None:
            self._fork(root, streams or {}, hooks or {})  # what the fork holds, first
        self._settle()
        frames = [_journal.frame_body(body) for body in bodies]
        folder = self._dir(root)
        path = folder / "journal.msgpack"
        with guard(folder, "creating a run"):
            folder.mkdir(parents=True, exist_ok=True)
            if path.exists() and path.stat().st_size > 0:
                raise RunExistsError(f"run {root!r} already exists")
            header = _journal.frame(_journal.header())
            tmp = folder / f"journal.msgpack.tmp{os.getpid()}"  # this process's own
            writer = _journal.Writer(str(tmp), 0)
            try:
                writer.append(header + b"".join(frames))
            except StorageError:
                tmp.unlink(missing_ok=True)  # leave nothing behind: the run does not exist
                with contextlib.suppress(OSError):
                    folder.rmdir()
                raise
            finally:
                writer.close()
            StreamRecords.start(str(folder))  # before the journal: it is a family's from birth
            os.close(os.open(folder / _wal.NAME, os.O_WRONLY | os.O_CREAT, 0o644))
            place_once(tmp, path, f"run {root!r}")
            _fsync_dir(folder)
            _fsync_dir(folder.parent)
        positions, pos = [], len(header)
        for frame in frames:
            positions.append(pos)
            pos += len(frame)
        return positions

    def _fork(
        self, root: str, streams: Mapping[str, tuple[str, int]], hooks: Mapping[str, str]
    ) -> None:
        # The run folder is made first and holds the copies while they are written: a crash
        # leaves a folder without a journal (a remnant `eve gc` removes, `eve doctor` names).
        check_run_id(root)
        if self.family_exists(root):
            raise RunExistsError(f"run {root!r} already exists")
        folder = self._dir(root)
        with guard(folder, "forking a run family"):
            self._streams.flush()  # what was appended before (a list naming the fork) first
            make_dirs(folder)
            make_dirs(self.path / "streams")
            self._records.write(str(folder), list(streams))  # named before they exist
            for name, (source, n) in streams.items():
                self._streams.copy(source, name, n, folder)
        for token, run_id in hooks.items():
            owner = self.claim_hook(token, run_id)
            if owner != run_id:
                raise HookConflictError(f"hook token {token!r} is owned by run {owner}")

    def families(self) -> list[str]:
        try:
            names = os.listdir(self.path / "runs")
        except FileNotFoundError:
            return []
        runs = os.path.join(self.path, "runs")  # strings, not Paths: called for every family
        return sorted(n for n in names if os.path.exists(os.path.join(runs, n, "journal.msgpack")))

    def family_exists(self, root: str) -> bool:
        return os.path.exists(self._run_files.of(root)[1])

    def stream_names(self, *, family: str | None = None) -> list[str]:
        if family is not None:
            return self._streams_of(family)
        names = {n.rpartition(".")[0] for n in listdir(self.path / "streams")}
        return sorted(n.replace("%3A", ":") for n in names if n)

    def _streams_of(self, root: str) -> list[str]:
        files = self._stream_files.of(check_run_id(root))
        return sorted({f.rpartition(".")[0].replace("%3A", ":") for f in files})

    def family_usage(self, root: str, *, streams: Sequence[str] | None = None) -> FamilyUsage:
        folder = self._run_files.of(root)[0]
        self._trim(root)  # the data's size, not the space a writer holds ahead of it
        paths = [os.path.join(folder, name) for name in listdir(Path(folder))]
        if streams is None:
            streams = self._streams_of(root)
        for name in streams:
            paths.extend(self._streams.paths(name))
        size, last = usage_of(paths)
        if not last:
            # Nothing but locks (or nothing yet): a folder a creator is making, or one a
            # creator killed a moment ago left. Its folder's time, not the epoch's: it is not
            # idle since 1970. (Not for others: a first lock taken in it changes that time.)
            with contextlib.suppress(OSError):
                last = os.stat(folder).st_mtime
        return FamilyUsage(size, last)

    def remnants(self) -> list[str]:
        roots = set(listdir(self.path / "runs"))
        roots |= set(self._stream_files.get()) | set(self._hook_files.get())
        return sorted(r for r in roots if not self.family_exists(r))

    def remove_family(self, root: str, *, inbox_mark: int | None = None) -> bool:
        folder = self._dir(root)
        if not (folder / "journal.msgpack").exists():
            self._unlink_family(root)  # a remnant: nothing can deliver to it
            return True
        with (
            guard(folder, "removing a run family"),
            inbox_lock(folder / "inbox.lock", REMOVE_WAIT, root, self.path),
        ):
            if inbox_mark is not None and self.inbox_end(root) != inbox_mark:
                return False  # delivered to since the caller decided
            self._unlink_family(root)
        return True

    def _unlink_family(self, root: str) -> None:
        """Hooks, streams, the run folder's data, its journal, its lock files, the folder:
        a crash at any point leaves a family still listed, or a remnant."""
        folder = self._dir(root)
        self._families.drop(root)
        writer = self._writers.pop(root, None)
        if writer is not None:
            writer.close()
        self._records.forget(root)
        try:
            empty_durably(str(folder))  # its entries must not make a removed stream again
            hooks, streams = self._hook_files, self._stream_files
            before = hooks.stamp()
            for name in hooks.get().get(root, []):
                (self.path / "hooks" / name).unlink(missing_ok=True)
            hooks.dropped(root, before)
            before = streams.stamp()
            names = self._streams_of(root)
            self._streams.forget(names)
            for name in names:
                for path in self._streams.paths(name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
            streams.dropped(root, before)
            remove_run_folder(folder)
        except OSError as exc:
            raise StorageError(
                f"{folder}: removing run family {root} failed: {exc.strerror or exc}; "
                "the next removal finishes it"
            ) from None
        finally:
            self._run_files.forget(root)
            self._inboxes.forget(root)

    def verify(self, *, repair: bool = False) -> list[Finding]:
        from . import verify

        return (verify.repair if repair else verify.verify)(self.path)

    def load(self, root: str, start: int = 0) -> FamilyLog:
        self._recovery.family(root)
        path = self._journal_path(root)
        read = _journal.read_file
        if self._view is not None and (patches := self._view.patches(root).get(path)):
            read = functools.partial(_wal.read_patched, patches=patches)
        result = None
        if start > 0:
            with contextlib.suppress(CorruptJournalError):  # not a record boundary: read all
                result = read(path, start)
            if result is not None and (not result.records or result.records[0][0] != start):
                result = None
        if result is None:
            start = 0
            result = read(path, 0)
        if root in self._leased:
            old = self._writers.pop(root, None)
            if old is not None:
                old.close()
            # Drops a torn tail (and space a killed owner reserved) first.
            self._writers[root] = _journal.Writer(path, result.end, reserve=True)
        records = result.records[1:] if start == 0 else result.records
        return FamilyLog(records=cast("list[tuple[int, StoredRecord]]", records), start=start)

    def _writer(self, root: str) -> _journal.Writer:
        writer = self._writers.get(root)
        if writer is None:
            path = self._journal_path(root)
            end = _journal.read_file(path).end
            writer = self._writers[root] = _journal.Writer(path, end, reserve=True)
        return writer

    def append(self, root: str, bodies: list[bytes], order: Order = RECORD) -> list[int]:
        self._commits.check()
        if self._families.holds(root):  # kept for its next commit (`FamilyCommits`)
            if order.streams is not None:  # the others' items durable first, its own with it
                self._streams.flush(order.streams, keep=root)
            positions = self._families.append(root, bodies, order)
            if not order.lazy:
                if asyncio._get_running_loop() is not None:  # by the next effect or reader
                    self._commits.pending(root)
                else:  # the engine's thread: durable on return, as callers there expect
                    self._families.commit(root)
            return positions
        writer = self._writer(root)
        if order.streams is not None:  # items a replay would not re-append: durable first
            self._streams.flush(order.streams)
        frames = list(map(_journal.frame_body, bodies))
        # On an event loop's thread the append returns before its fdatasync, which overlaps
        # the caller's code up to the next effect or visible write (`_settle`); on another
        # thread (the engine's, driving several families) it waits, as callers there expect.
        durable = not order.lazy
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        on_loop = asyncio._get_running_loop() is not None  # called by a coroutine
        offset = writer.append(data, sync=durable, defer=durable and on_loop)
        self._checks.wrote(writer.path, writer.ino, offset, data)
        if writer.unsettled is not None:
            self._commits.pending(root)
        positions = []
        for frame in frames:
            positions.append(offset)
            offset += len(frame)
        return positions

    def heads(
        self, *, roots: Sequence[str] | None = None, inbox: bool = True, runnable: bool = False
    ) -> list[FamilyHead]:
        # What `families` and `read_head` do for each family, with the paths joined as
        # strings once (three joins a family were ~10% of a listing of 10,000).
        runs = os.path.join(self.path, "runs")
        try:
            names = sorted(os.listdir(runs) if roots is None else map(check_run_id, roots))
        except FileNotFoundError:
            return []
        out = []
        for root in names:
            folder = f"{runs}{os.sep}{root}{os.sep}"
            if os.path.exists(folder + "journal.msgpack"):
                head = read_head_file(folder + "head.msgpack")
                out.append(FamilyHead(root, head, self.inbox_end(root) if inbox else -1))
        return out

    def read_head(self, root: str) -> dict[str, Any] | None:
        return read_head_file(os.path.join(self.path, "runs", check_run_id(root), "head.msgpack"))

    def write_head(self, root: str, head: dict[str, Any]) -> None:
        self._trim(root)  # the journal's size on disk is its data's from here on
        self._settle()
        # Rewritten in place, as a checksummed frame: replacing the file by a rename cost
        # ~0.2 ms here (ext4 flushes a file renamed over another), once a turn. A reader
        # meeting the write sees a bad checksum and reads again; a head torn by a crash is
        # rebuilt from the journal, as a missing one is.
        folder = self._run_files.of(root)[0]
        note = self._checks.note(root)
        data = _journal.frame({**head, INTACT_KEY: note} if note else head, "head")
        with guard(folder, "writing the run status"):
            fd = os.open(os.path.join(folder, "head.msgpack"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                _journal.write_all(fd, data, 0)
                if os.fstat(fd).st_size > len(data):
                    os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        if parks_on_timer(head):
            self._timers.note(root)

    def timers_version(self) -> Hashable:
        return self._timers.version()

    def timers_since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        return self._timers.since(version)

    async def wait_timers(self, version: Hashable, timeout: float) -> bool:
        return await self._timers.wait(version, timeout)

    # -- inbox -------------------------------------------------------------------------------
    def deliver(self, root: str, token: str, payload: Any) -> int:
        self._settle()
        folder, _, path = self._run_files.of(root)  # (strings: a `Path` costs more to build)
        self._journal_path(root)
        item = _journal.frame(inbox_record(token, payload, self.now()), "payload")
        lock = os.path.join(folder, "inbox.lock")
        with guard(folder, "delivering"), inbox_lock(lock, 30.0, root, self.path):
            self._journal_path(root)  # again under the lock: `eve gc` removes under it
            self.check_intact(root)
            head = None if root in self._inboxes.ends else self.read_head(root)
            end, shift = self._inboxes.valid_end(root, path, (head or {}).get("inbox_next"))
            header = b"" if end else _journal.frame(_journal.header(_journal.INBOX_FORMAT))
            writer = _journal.Writer(path, end)  # drops a torn tail first
            try:
                offset = writer.append(header + item)
            finally:
                writer.close()
            if header:  # a new inbox: its entry durable before the delivery is acknowledged
                _fsync_dir(folder)
            self._inboxes.ends[root] = writer.end + shift
        touched(os.path.join(self._runs_resolved, root, "inbox.msgpack"))  # wakes waits here
        return offset + len(header) + shift

    def check_intact(self, root: str) -> None:
        """Refuse to write to a family with damage in its journal, inbox or streams: every
        record is checked once per process (then only what was added since), so damage far
        before where a load begins is not written past without a word (a stream item an
        earlier repair replaced is not: it reads as a `LostItem`).

        What an earlier process checked, its head says (`_intact`: each file's checked end
        and the crc32 of the bytes before it): bytes unchanged since need only that crc, at
        the speed of zlib, not a walk over their records."""
        streams = self._family_streams(root)
        paths = [*self._run_files.of(root)[1:], *streams]
        self._checks.checked[root] = paths
        hints = functools.cache(lambda: (self.read_head(root) or {}).get(INTACT_KEY))  # if asked
        for path in paths:
            try:
                self._checks.check(path, hints)
            except CorruptJournalError as exc:
                self._checks.known.pop(path, None)
                raise CorruptJournalError(
                    exc.file,
                    exc.offset,
                    exc.reason,
                    what=f"{exc.what}; run family {root} takes no writes until it is "
                    "repaired (nothing was written)",
                ) from None
            # A stream item an earlier repair replaced is no damage here: reads return it as
            # a `LostItem`, and the family's own code decides whether it can go on without it.

    def _family_streams(self, root: str) -> list[str]:
        """The data files of the family's streams (`stream_family`): those its record names
        (`_stream_record`), else those listed."""
        named = self._records.names(root)
        if named is not None:
            return [self._streams.paths(name)[0] for name in sorted(named)]
        folder = os.path.join(self.path, "streams")
        names = self._stream_files.of(root)
        return [os.path.join(folder, n) for n in names if n.endswith(STREAM_SUFFIX)]

    def read_inbox(self, root: str, start: int = 0) -> tuple[list[InboxItem], int]:
        # What this process appended before it reads the inbox is readable first: a sender
        # that sees no such item after its delivery knows the reading comes after it.
        self._streams.drain()
        return read_inbox_file(self._run_files.of(root)[2], start)

    def compact_inbox(self, root: str, keep_from: int) -> bool:
        """Rewrite the inbox without its deliveries below id `keep_from` once they are at
        least `COMPACT_MIN` bytes and no fewer than the ones kept; True if it did. The new
        file is written aside, fsync'd and renamed under `inbox.lock` (with the directory
        fsync'd before the lock is released: a later delivery must not land in a file a
        power loss could undo); either file, old or new, gives every kept delivery its id."""
        self._settle()
        self._families.commit(root)  # the receipts of what it drops (lazy records) first
        folder, _, inbox = self._run_files.of(root)
        try:
            if os.path.getsize(inbox) < COMPACT_MIN:
                return False  # not worth it yet (and no lock taken, no lock file made)
        except FileNotFoundError:
            return False
        path, tmp = Path(inbox), Path(f"{inbox}.tmp{os.getpid()}")
        try:  # optional work: a busy lock (a delivery, `eve doctor`) or a removed run skips it
            with inbox_lock(os.path.join(folder, "inbox.lock"), 1.0, root, self.path):
                done = compact_inbox_file(path, tmp, keep_from, COMPACT_MIN)
        except (OwnershipError, RunNotFoundError, PermissionError):
            return False
        if done is not None:
            self._inboxes.ends[root] = done  # ids do not move: the end as it was
        return done is not None

    def inbox_name(self, root: str) -> str:
        return self._run_files.of(root)[2]

    def inbox_end(self, root: str) -> int:
        return self._inboxes.end(root)

    # -- hooks -------------------------------------------------------------------------------
    def claim_hook(self, token: str, run_id: str) -> str:
        self._settle()
        return self._hooks.claim(token, run_id)

    def hook_owner(self, token: str) -> str | None:
        return self._hooks.owner(token)

    def release_hook(self, token: str, run_id: str) -> None:
        # What made the release right (a `done` record, the records before a close) is durable
        # before the hook goes, and the removal is durable before the caller goes on: a cut
        # must not bring back a hook whose run ended (its head may be stale) or closed it.
        self._settle()
        self._hooks.release(token, run_id)

    # -- ownership and wake-ups --------------------------------------------------------------
    def acquire(self, root: str, wait: float | None = None) -> Lease:
        folder = self._run_files.of(root)[0]  # (strings: a `Path` costs more to build)
        self._journal_path(root)
        with guard(folder, "taking ownership"):
            lock = take_lease(os.path.join(folder, "owner.lock"), wait or 0.0, root, self.path)
        try:
            self._journal_path(root)  # again: removed while this process waited for the lock
            with guard(folder, "replaying the run's write-ahead file"):
                _wal.replay(folder, self._streams_folder)
            self.check_intact(root)
            self._families.open(root, folder)
        except (RunNotFoundError, CorruptJournalError, StorageError):
            _unlock(lock)
            raise
        if self._records.names(root) is None:  # an older eve's family: named once, here
            with contextlib.suppress(OSError):  # (without one its streams are listed)
                self._records.write(self._run_files.of(root)[0], self._streams_of(root))
        self._leased.add(root)
        return _FileLease(self, root, lock)

    async def wait_inbox(self, root: str, mark: int, timeout: float) -> bool:
        with DirWatcher(self._dir(root), ["inbox.msgpack"]) as watcher:
            # Watching began before this check: a delivery after it is seen by `wait`.
            deadline = time.monotonic() + timeout
            while self.inbox_end(root) == mark:
                if not await watcher.wait(deadline - time.monotonic()):
                    return self.inbox_end(root) != mark
        return True

    # -- streams -----------------------------------------------------------------------------
    def stream_append(self, name: str, item: Any) -> int:
        frame = _journal.frame({"v": item}, "stream item")
        try:  # not `with guard(...)`: this runs several times per step
            return self._streams.append(name, frame)
        except PermissionError:
            with guard(self._streams.path, "appending to a stream"):
                raise

    def _trim(self, root: str) -> None:
        """Give back the space reserved ahead of the family's journal (`_journal.Writer`):
        before its head is written and its size is told, which are the data's."""
        writer = self._writers.get(root)
        if writer is not None:
            writer.give_back()

    def before_effect(self, *, observed: bool = True) -> None:
        if observed:
            self._settle()  # pending families commit with their open batches, then the rest:
            self._streams.drain()  # open batches written: a reader can see them
        else:
            self._streams.hold(EFFECT_WAIT)
            self._settle(soon=True)

    def _settle(self, *, soon: bool = False) -> None:
        """Every deferred record durable now (`CommitQueue.commit`); `soon` (on an event loop):
        `EFFECT_WAIT` later instead. Called before anything a reader could see is written (a
        stream item, a head, a delivery, a hook, a family)."""
        if soon:
            self._commits.commit_soon(_asyncio_loop())
        else:
            self._commits.commit()

    def _commit_family(self, root: str) -> bool:
        if self._families.holds(root):
            self._families.commit(root)
            return True
        writer = self._writers.get(root)
        if writer is not None:
            writer.settle()
        return writer is None or writer.unsettled is None

    def stream_mark(self) -> int:
        return self._streams.appends

    def stream_read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        return self._streams.read(name, start, end)

    def stream_length(self, name: str) -> int:
        return self._streams.length(name)

    def stream_versions(self, names: Sequence[str]) -> list[Hashable]:
        # The data file's identity: any append (or a rewrite, a repair) changes its size or
        # mtime; one stat each, once this process's open batches are written (they are
        # appends too: a token taken before they are written would stand for less).
        self._streams.drain()
        out: list[Hashable] = []
        for name in names:
            try:
                st = os.stat(self._streams.paths(name)[0])
            except OSError:
                out.append(None)
                continue
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return out

    def stream_digest(self, name: str, count: int, after: tuple[int, Any] | None = None) -> Any:
        return self._streams.digest(name, count, after)

    def stream_tail(self, name: str, start: int = 0) -> AsyncIterator[tuple[int, Any]]:
        return self._streams.tail(name, start)

    def close(self) -> None:
        failure = self._families.close()
        writers, self._writers = list(self._writers.values()), {}
        for writer in writers:  # every writer closed; the first refusal raised after
            try:
                writer.close()
            except StorageError as exc:
                failure = failure or exc
        self._streams.close()
        if failure is not None:
            raise failure


@contextlib.contextmanager
def inbox_lock(path: Path | str, wait: float, root: str, data: Path) -> Iterator[None]:
    """`inbox.lock`, held while a delivery or a compaction writes the inbox (`_flock`)."""
    fd = _flock(path, wait, root, data)
    if fd is None:
        raise OwnershipError(f"run family {root}: {path} is held by another process; retry")
    try:
        yield
    finally:
        _unlock(fd)


def take_lease(path: Path | str, wait: float, root: str, data: Path) -> int:
    """`owner.lock`, held while a process owns the family (`_flock`); its descriptor."""
    fd = _flock(path, wait, root, data)
    if fd is None:
        raise OwnershipError(
            f"run family {root} is owned by another process ({path}); wait until it "
            "parks or finishes"
        )
    return fd


def _flock(path: Path | str, wait: float, root: str, data: Path) -> int | None:
    """A plain `flock` on `path` (made if missing), waited for up to `wait` seconds: ~5 us
    a use against ~0.2 ms for a `filelock` object; the same lock as the `filelock` that
    `eve doctor` and a migration take on the file (flock on the same file), and as theirs
    free the moment its holder dies. Its descriptor; None if still held by then."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:  # the run's folder was removed (`eve gc`)
        raise RunNotFoundError(f"no run family {root!r} in {data}") from None
    try:
        deadline, pause = time.monotonic() + wait, 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
    except BaseException:
        os.close(fd)
        raise


def _unlock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
