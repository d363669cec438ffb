"""Checking and safely repairing a `LocalWorld` data directory (what `eve doctor` runs).

`verify(path)` reads every file of the layout without writing and returns one `Finding` per
file. `repair(path)` fixes what can be fixed without losing anything and without making a
family worse:

* a torn tail (a record cut short by a crash) is copied to the quarantine folder, then cut;
* damaged records in the middle of a journal, inbox or stream (or a whole last record whose
  checksum fails) are copied there and overwritten in place by `gap` records of the same
  length, so every later record keeps its offset: journal positions, inbox delivery ids and
  stream item indexes do not move, nothing earlier is delivered again and no id is reused;
* unreadable files (a damaged head, a leftover) are moved there; a hook file whose content is
  damaged is rewritten from the journal that claims its token; a damaged `FORMAT` is
  rewritten.

Nothing is ever deleted: `quarantine/<stamp>/` mirrors the layout it came from, with a
`NOTE.txt` saying what each file there is. After a repair a family either works — what a gap
replaced is reported (`lost`: a delivery, an older generation's record) — or, when a gap lies
where a replay reads, it is `damaged`: readable, refused by the engine with the same words,
and no further repair changes it.

Repairs take the same locks the writers take (the family lease for a journal, `inbox.lock`
for an inbox, `flock` on a stream), so a file in use by a live process is left alone and
reported as busy.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import filelock
import msgpack

from ... import _codec, _journal
from ..._errors import CorruptJournalError, StorageError, WorldError
from ..._family import GAP, load_family
from ..._findings import Finding
from ..._world import stream_family
from . import stream_record as _stream_record
from . import wal as _wal
from .layout import FORMAT_VERSION, format_text, read_format, store_id, written_by_format_2
from .stream_index import encode_index, index_form, index_offsets

if TYPE_CHECKING:
    from .world import LocalWorld

QUARANTINE = "quarantine"
NOTE = "NOTE.txt"


# -- verifying -------------------------------------------------------------------------------------
def verify(path: str | os.PathLike[str]) -> list[Finding]:
    """Check every file under the data directory `path`; writes nothing."""
    root = _data_dir(path)
    findings = [_check_format(root)]
    world = _reader(root)
    runs, streams = root / "runs", root / "streams"
    stream_files = _listdir(streams)
    by_family = _stream_record.listed(stream_files)
    for family in _listdir(runs):
        folder = runs / family
        if not folder.is_dir():
            findings.append(_temp(root, folder))
            continue
        findings.extend(_check_family(root, folder, world, by_family.get(family, set())))
    for name in stream_files:
        file = streams / name
        if name.endswith(".msgpack"):
            findings.append(_check_log(root, file, "stream"))
            findings.append(_check_index(root, file))
        elif not name.endswith(".idx"):
            findings.append(_temp(root, file))
    hooks = root / "hooks"
    for token in _listdir(hooks):
        findings.append(_check_hook(root, hooks / token))
    return [replace(f, family=_family_of(f.path)) for f in findings]


def _family_of(rel: str) -> str | None:
    """The run family a file of the data directory belongs to: `runs/<root>/...`, or a stream
    `streams/<kind>.<root>[...]` (`stream_family`)."""
    parts = rel.split("/")
    if len(parts) >= 2 and parts[0] == "runs":
        return parts[1]
    if len(parts) == 2 and parts[0] == "streams":
        return stream_family(parts[1].removesuffix(".msgpack").removesuffix(".idx"))
    return None


def _reader(root: Path) -> LocalWorld | None:
    """The directory opened read-only, to replay what its families' records say (None when
    its FORMAT does not let it open: that finding says so)."""
    from .world import LocalWorld  # here: local.py is the larger import, verify the rarer call

    try:
        return LocalWorld(root, create=False)
    except WorldError:
        return None


def _data_dir(path: str | os.PathLike[str]) -> Path:
    root = Path(path)
    if not root.is_dir():
        raise WorldError(f"{root}: no data directory there (nothing to check)")
    if not (root / "runs").is_dir() and _check_format(root).state != "ok":
        raise WorldError(f"{root}: not an eve data directory (no eve FORMAT file, no runs/)")
    _refuse_old_format(root)
    return root


def _refuse_old_format(root: Path) -> None:
    """A store of an older format is neither checked nor repaired: its files are in forms this
    version does not read, and a repair would take them for damage."""
    from .layout import old_format_error

    reading = read_format(root)
    if reading.state == "older":
        assert reading.version is not None
        raise old_format_error(root / "FORMAT", reading.version)


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
    reading = read_format(root)
    size = _size(root / "FORMAT")
    if reading.state == "ok":
        return Finding("FORMAT", "format", "ok", reading.detail, size=size)
    if reading.state == "missing":
        return Finding("FORMAT", "format", "stale", reading.detail)
    if reading.state in ("damaged", "newer"):
        rewrite = f"repair rewrites it as version {FORMAT_VERSION} (the old one in quarantine/)"
        if reading.state == "newer" and not written_by_format_2(root):
            rewrite = "not repaired: nothing here says which format its files are in"
        return Finding("FORMAT", "format", "unreadable", f"{reading.detail}; {rewrite}", size=size)
    return Finding("FORMAT", "format", "unreadable", reading.detail, size=size)


def _check_family(
    root: Path, folder: Path, world: LocalWorld | None, streams: set[str]
) -> list[Finding]:
    """`streams`: the names of the family's streams in the streams folder."""
    out: list[Finding] = []
    for name in _listdir(folder):
        file = folder / name
        if name == _stream_record.RECORD:
            out.append(_check_record(root, file, streams))
        elif name == "journal.msgpack":
            out.append(_check_log(root, file, "journal"))
        elif name == "inbox.msgpack":
            out.append(_check_log(root, file, "inbox"))
        elif name == "head.msgpack":
            out.append(_check_head(root, file))
        elif name in ("owner.lock", "inbox.lock"):
            out.append(_check_lock(root, file))
        elif name == _wal.NAME:
            out.append(_check_wal(root, file))
        else:
            out.append(_temp(root, file))
    if not (folder / "journal.msgpack").exists():
        # A crash while creating the run (its journal is written aside, then renamed).
        detail = "run folder without a journal: its creation never finished"
        out.append(Finding(_rel(root, folder), "temp", "leftover", detail))
        return out
    if world is not None and all(f.state in ("ok", "held", "lost") for f in out if f.kind in
                                 ("journal", "inbox")):  # fmt: skip
        beyond = _check_replay(root, folder, world)
        out = [_merge(f, beyond.get(f.path)) for f in out]
    return out


def _merge(found: Finding, replay: Finding | None) -> Finding:
    if replay is None or found.state not in ("ok", "held", "lost"):
        return found
    if found.state == "lost" and replay.state == "lost":
        detail = f"{found.detail}; {replay.detail}"
        return Finding(found.path, found.kind, "lost", detail, found.offset, found.size,
                       found.records)  # fmt: skip
    return Finding(replay.path, replay.kind, replay.state, replay.detail, replay.offset,
                   found.size, found.records)  # fmt: skip


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
    gaps = [pos for pos, rec in result.records[1:] if rec.get("t") == GAP]
    if gaps:
        where = ", ".join(map(str, gaps[:5])) + (" ..." if len(gaps) > 5 else "")
        read = "; each reads as lost (world.LostItem)" if kind == "stream" else ""
        detail = (
            f"{len(gaps)} damaged record(s) replaced by an earlier repair (offset {where}); "
            f"their bytes are in quarantine/{read}"
        )
        return Finding(rel, kind, "lost", detail, gaps[0], size=size, records=records)
    return Finding(rel, kind, "ok", f"{records} record(s)", size=size, records=records)


def _check_replay(root: Path, folder: Path, world: LocalWorld) -> dict[str, Finding]:
    """What the family's records say beyond their checksums, by file: a record a repair
    replaced where a replay reads (the journal `damaged`), deliveries received by older
    generations that the inbox no longer holds (the inbox `lost`)."""
    journal = _rel(root, folder / "journal.msgpack")
    inbox = _rel(root, folder / "inbox.msgpack")
    try:
        load_family(world, folder.name).check_replayable()  # as the engine does, to agree
        family = load_family(world, folder.name, full=True, log=True)
    except CorruptJournalError as exc:
        detail = f"{exc.what}; {exc.advice}"
        return {journal: Finding(journal, "journal", "damaged", detail, exc.offset)}
    except (WorldError, OSError, LookupError, TypeError, ValueError) as exc:
        return {journal: Finding(journal, "journal", "damaged", f"cannot be replayed: {exc}", 0)}
    try:  # a compacted inbox no longer holds the consumed deliveries before its first id
        with open(folder / "inbox.msgpack", "rb") as f:
            shift, header_end = _journal.inbox_layout(f.read(_journal.HEADER_MAX))
        first_id = shift + header_end
    except FileNotFoundError:
        first_id = 0
    lost = [rec for rec in family.log or () if "lost" in rec and rec["lost"] >= first_id]
    if not lost:
        return {}
    first = lost[0]
    detail = (
        f"{len(lost)} delivery(ies) received by finished generations are gone (the first at "
        f"id {first['lost']}, received by run {first['run']}); a replay does not need them"
    )
    return {inbox: Finding(inbox, "inbox", "lost", detail, first["lost"])}


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
        data = file.read_bytes()
        head = _journal.head_from(data)
    except Exception:  # any damage: the head is a cache rebuilt from the journal
        return Finding(rel, "head", "stale", rebuilt, size=_size(file))
    if head is None and _journal.is_plain_head(data):
        detail = "the older form, without a checksum: not believed, rebuilt from the journal"
        return Finding(rel, "head", "stale", detail, size=len(data))
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
    except OSError as exc:  # a read-only file system: a lock is still tested read-only
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        return _held_read_only(file)
    lock.release()
    return False


def _held_read_only(file: Path) -> bool:
    fd = os.open(file, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def _check_wal(root: Path, file: Path) -> Finding:
    """A family's write-ahead file (`wal`): entries whose bytes the files do not hold yet
    (a cut after their commit) are written there by the family's next open (or a repair)."""
    rel = _rel(root, file)
    try:
        pending = _wal.replay(str(file.parent), str(root / "streams"), dry_run=True)
    except (OSError, StorageError) as exc:
        return Finding(rel, "wal", "unreadable", str(exc))
    if pending.changed:
        detail = (
            f"{pending.entries} commit(s), {pending.changed} byte(s) not in the journal or "
            "streams yet: written there when the run is next opened (or repaired)"
        )
        return Finding(rel, "wal", "torn", detail, size=_size(file), records=pending.entries)
    return Finding(rel, "wal", "ok", f"{pending.entries} commit(s)", size=_size(file))


def replay_wals(root: Path) -> None:
    """Write what each family's write-ahead file holds into its files (under its lease; a
    family in use is left to its owner), before a repair reads them."""
    runs = root / "runs"
    for family in _listdir(runs):
        folder = runs / family
        if not (folder / _wal.NAME).is_file() or not _wal.read(str(folder / _wal.NAME)):
            continue
        lock = filelock.FileLock(str(folder / "owner.lock"), timeout=0, preserve_lock_file=True)
        with contextlib.suppress(filelock.Timeout), lock:
            _wal.replay(str(folder), str(root / "streams"))


def _check_record(root: Path, file: Path, streams: set[str]) -> Finding:
    """A family's record of its streams (`_stream_record`) must name each of them: the damage
    check before a write (`LocalWorld.check_intact`) reads only the streams it names."""
    rel = _rel(root, file)
    try:
        data = file.read_bytes()
    except OSError as exc:
        return Finding(rel, "record", "unreadable", str(exc))
    named = set(_stream_record.parse(data, file.parent.name))
    unnamed = sorted(streams - named)
    if unnamed:
        detail = (
            f"does not name {len(unnamed)} of the family's streams ({unnamed[0]}): a repair "
            "names them"
        )
        return Finding(rel, "record", "stale", detail, size=len(data), records=len(named))
    detail = f"{len(named)} stream(s)"
    return Finding(rel, "record", "ok", detail, size=len(data), records=len(named))


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
        detail = f"names run {owner!r}, which does not exist"
        claimant = _hook_claimant(root, file.name)
        if claimant is not None:  # damaged: deliveries to the run waiting on it fail
            detail += f"; the journal of run {claimant} claims it"
            return Finding(rel, "hook", "corrupt", detail, size=_size(file))
        return Finding(rel, "hook", "dangling", detail)
    return Finding(rel, "hook", "ok", f"run {owner}", size=_size(file))


def _temp(root: Path, file: Path) -> Finding:
    return Finding(_rel(root, file), "temp", "leftover", "not part of the layout", size=_size(file))


# -- repairing -------------------------------------------------------------------------------------
def repair(path: str | os.PathLike[str]) -> list[Finding]:
    """Fix every finding of `verify` that is not ok; return what was done, file by file."""
    root = _data_dir(path)
    bin_ = _Quarantine(root)
    done: list[Finding] = []
    replay_wals(root)  # committed bytes first: a tail they complete is no damage to cut
    for found in verify(root):
        if found.ok or found.kind == "lock" or found.state in ("lost", "damaged"):
            continue  # locks need nothing; what an earlier repair left, no repair changes
        if found.kind == "format" and found.state != "unreadable":
            continue  # a missing FORMAT is rewritten on open
        file = root / found.path
        try:
            with _guard_for(root, found):
                done.append(_repair_one(root, bin_, found, file))
        except filelock.Timeout:
            done.append(_replace(found, "busy", "in use by a live process; not repaired"))
        except WorldError as exc:  # e.g. an index whose stream could not be repaired
            done.append(_replace(found, found.state, f"not repaired: {exc}"))
        except OSError as exc:
            done.append(_replace(found, "unreadable", f"repair failed: {exc}"))
    return done


def _replace(found: Finding, state: str, detail: str) -> Finding:
    return Finding(found.path, found.kind, state, detail, found.offset, found.size, found.records)


_LEASED_KINDS = ("journal", "inbox", "head", "record")  # a family's files, not a stream's


@contextlib.contextmanager
def _guard_for(root: Path, found: Finding) -> Iterator[None]:
    """Hold the lock writers of this file hold (the family lease, inbox.lock, a stream flock)."""
    parts = Path(found.path).parts
    if parts[0] == "runs" and len(parts) >= 2 and found.kind in _LEASED_KINDS:
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
    if found.kind in ("journal", "inbox", "stream") and found.state == "torn":
        return _cut(root, bin_, found, file)
    if found.kind in ("journal", "inbox", "stream") and found.state == "corrupt":
        return _fill(root, bin_, found, file)
    if found.kind == "index":
        count = _write_index(file.with_suffix(".msgpack"))
        return _replace(found, "repaired", f"rebuilt from the stream ({count} item(s))")
    if found.kind == "record":
        return _rewrite_record(root, found, file)
    if found.kind == "format":
        if read_format(root).state == "newer" and not written_by_format_2(root):
            return _replace(found, found.state, found.detail)  # a newer eve's, maybe: kept
        keep = store_id(root)  # the store keeps its id when FORMAT still shows it
        where = bin_.move(file, "unreadable")
        _write_format(file, keep)
        return _replace(found, "repaired", f"rewritten; the damaged one moved to {where}")
    if found.kind == "hook" and found.state == "corrupt":
        return _rewrite_hook(root, bin_, found, file)
    if found.kind == "journal" and file.name == "journal.msgpack":
        # The journal is the run: without a readable one the whole family goes, together.
        where = bin_.move(file.parent, "no readable run record")
        return _replace(found, "quarantined", f"no readable run; folder moved to {where}")
    where = bin_.move(file, found.detail)  # a damaged head, a dangling hook, a leftover
    return _replace(found, "quarantined", f"moved to {where}")


def _cut(root: Path, bin_: _Quarantine, found: Finding, file: Path) -> Finding:
    """A torn tail: keep the valid prefix in place and the cut bytes in the quarantine."""
    fresh = _check_log(root, file, found.kind)  # under the lock now: the state may have moved
    if fresh.state != "torn" or fresh.offset is None:
        return _replace(fresh, fresh.state, "nothing to cut any more")
    offset = fresh.offset
    if found.kind == "journal" and fresh.records < 1:
        # Nothing but the header survives: without its start record the run cannot be read.
        where = bin_.move(file.parent, "no readable run record before a torn tail")
        return _replace(fresh, "quarantined", f"no readable run left; folder moved to {where}")
    where = bin_.copy_tail(file, offset)
    with open(file, "r+b") as f:
        f.truncate(offset)
        os.fsync(f.fileno())
    if found.kind == "stream":
        _write_index(file)
    what = f"torn tail cut at offset {offset}; its bytes kept in {where}"
    return Finding(fresh.path, fresh.kind, "repaired", what, offset, fresh.size, fresh.records)


def _fillers(
    file: Path, kind: str, start: int, stop: int, at_end: bool
) -> tuple[list[tuple[int, int]], list[bytes] | None]:
    """The pieces ``(start, stop)`` the damage from ``start`` to ``stop`` is cut into and the
    gap records of their lengths that replace them (None: a piece too short for one)."""
    pieces = _pieces(file, kind, start, stop)
    fillers = [_gap_frame(b - a) for a, b in pieces]
    if start == 0:  # the header: a fresh one first (its kind is the file's), then gaps
        pieces, fillers = _with_header(kind, pieces, fillers)
    if at_end and fillers[-1] is None:  # nothing after it to keep in place: any length
        a, b = pieces[-1]
        record = _header_of(kind) if a == 0 else {"t": GAP, "n": b - a}
        fillers[-1] = _journal.frame(record)
    if any(f is None for f in fillers):
        return pieces, None
    return pieces, [f for f in fillers if f is not None]


def _overwrite(
    file: Path, pieces: list[tuple[int, int]], fillers: list[bytes], stop: int, size: int | None
) -> None:
    """Write each filler over its piece, durably; ``size``: the file's size when the damage
    (ending at ``stop``) was its last data: zeros a writer reserved after it are cut."""
    with open(file, "r+b") as f:
        for (a, _), filler in zip(pieces, fillers, strict=True):
            _journal.write_all(f.fileno(), filler, a)
        end = max(stop, pieces[-1][0] + len(fillers[-1]))
        if size is not None and end < size:
            f.truncate(end)
        os.fsync(f.fileno())


def _fill(root: Path, bin_: _Quarantine, found: Finding, file: Path) -> Finding:
    """Damaged records: their bytes copied to the quarantine, then overwritten in place by gap
    records of the same length (every later record keeps its offset), region by region."""
    fresh = _check_log(root, file, found.kind)  # under the lock now: the state may have moved
    regions: list[str] = []
    if found.kind == "journal" and not _has_run_record(file.read_bytes()):
        # No run record survives the damage: without its start the run cannot be read.
        where = bin_.move(file.parent, "no readable run record")
        return _replace(fresh, "quarantined", f"no readable run left; folder moved to {where}")
    while fresh.state == "corrupt" and fresh.offset is not None and len(regions) < 64:
        data = file.read_bytes()
        start, stop = fresh.offset, _damage_end(data, fresh.offset)
        at_end = not any(data[stop:])
        pieces, fillers = _fillers(file, found.kind, start, stop, at_end)
        if fillers is None:
            detail = f"{stop - start} damaged byte(s) at offset {start} too few to replace"
            return _replace(fresh, "corrupt", detail + "; left as they are")
        saved = bin_.copy_range(file, data[start:stop], start)
        _overwrite(file, pieces, fillers, stop, len(data) if at_end else None)
        regions.append(f"{stop - start} byte(s) at offset {start} (kept in {saved})")
        bin_.note(
            f"{fresh.path}: {stop - start} damaged byte(s) at offset {start} copied to "
            f"{saved}, then replaced in place by {len(pieces)} gap record(s) of the same "
            "length (every later record keeps its offset)"
        )
        fresh = _check_log(root, file, found.kind)
    if fresh.state == "torn":  # damage before a torn tail: the tail is cut as any
        regions.append(_cut(root, bin_, fresh, file).detail)
    elif found.kind == "stream":
        _write_index(file)
    if not regions:
        return _replace(fresh, fresh.state, "nothing to repair any more")
    what = "damaged records replaced by gap records of their length: " + "; ".join(regions)
    return Finding(fresh.path, fresh.kind, "repaired", what, found.offset, fresh.size,
                   fresh.records)  # fmt: skip


def _has_run_record(data: bytes) -> bool:
    """Whether any valid frame of a journal's bytes holds a record of a run."""
    pos = _journal.next_valid_frame(data, 0)
    while pos is not None:
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
        unpacker.feed(data[pos:])
        with contextlib.suppress(Exception):
            body = unpacker.unpack()[2]
            if _codec.decode(body).get("t") not in ("header", GAP):
                return True
        pos = _journal.next_valid_frame(data, pos + 1)
    return False


def _damage_end(data: bytes, start: int) -> int:
    """Where the damage starting at `start` ends: the next valid frame, else (damage in the
    last record) the end of the whole object there, else of the data before reserved zeros."""
    nxt = _journal.next_valid_frame(data, start + 1)
    if nxt is not None:
        return nxt
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data[start:])
    try:
        whole = isinstance(unpacker.unpack(), list)  # a frame's shape: its end is known
    except Exception:
        whole = False
    if whole and not any(data[start + int(unpacker.tell()) :]):
        return start + int(unpacker.tell())  # zeros after it: space a writer reserved
    return len(data)


def _pieces(file: Path, kind: str, start: int, stop: int) -> list[tuple[int, int]]:
    """The damaged span cut where its records began: a stream's index says (so each item
    keeps its index); elsewhere offsets need no more than one gap."""
    if kind != "stream":
        return [(start, stop)]
    try:
        stored = index_offsets(file.with_suffix(".idx").read_bytes())
    except (OSError, StorageError):
        return [(start, stop)]
    if start not in stored:
        return [(start, stop)]
    cuts = [start, *(o for o in stored if start < o < stop), stop]
    return list(itertools.pairwise(cuts))


def _with_header(
    kind: str, pieces: list[tuple[int, int]], fillers: list[bytes | None]
) -> tuple[list[tuple[int, int]], list[bytes | None]]:
    """The damaged span at the start of a file: a header of its kind, then gap records."""
    header = _header_of(kind)
    first_start, first_stop = pieces[0]
    plain = _journal.frame(header)
    rest = first_stop - first_start - len(plain)
    gap = _gap_frame(rest) if rest > 0 else None
    if gap is not None:
        split = first_start + len(plain)
        return [(first_start, split), (split, first_stop), *pieces[1:]], [plain, gap, *fillers[1:]]
    return pieces, [_padded(header, first_stop - first_start), *fillers[1:]]


def _header_of(kind: str) -> dict[str, Any]:
    formats = {"journal": _journal.JOURNAL_FORMAT, "inbox": _journal.INBOX_FORMAT}
    return _journal.header(formats.get(kind, "eve-world-stream"))


def _gap_frame(size: int) -> bytes | None:
    return _padded({"t": GAP, "n": size}, size) or _padded({"t": GAP}, size)


def _padded(record: dict[str, Any], size: int) -> bytes | None:
    """`record` as a valid frame of exactly `size` bytes, padded (None: it takes more)."""
    for extra in ({}, {"y": None}, {"y": None, "z": None}):
        for pad in (None, *range(max(0, size - 40), size)):
            rec: dict[str, Any] = {**record, **extra}
            if pad is not None:
                rec["x"] = bytes(pad)
            out = _journal.frame(rec)
            if len(out) == size:
                return out
            if pad is None and len(out) > size:
                break
    return None


def _write_format(file: Path, keep: str | None) -> None:
    tmp = file.with_name(f"FORMAT.tmp{os.getpid()}")
    tmp.write_bytes(format_text(keep))
    _fsync(tmp)
    os.replace(tmp, file)
    _fsync(file.parent)


def _rewrite_record(root: Path, found: Finding, file: Path) -> Finding:
    """Name every stream of the family (under its lease, as a writer names them): the names
    it held and those listed now."""
    family = file.parent.name
    try:
        held = set(_stream_record.parse(file.read_bytes(), family))
    except OSError:
        held = set()
    listed = _stream_record.listed(_listdir(root / "streams")).get(family, set())
    _stream_record.StreamRecords.write(str(file.parent), sorted(held | listed))
    return _replace(found, "repaired", f"rewritten: names {len(held | listed)} stream(s)")


def _rewrite_hook(root: Path, bin_: _Quarantine, found: Finding, file: Path) -> Finding:
    """A hook file whose content is damaged: rewritten with the run its journal says claims
    the token (the journal is the truth), the damaged one kept."""
    owner = _hook_claimant(root, file.name)
    if owner is None:
        where = bin_.move(file, found.detail)
        return _replace(found, "quarantined", f"no run claims it; moved to {where}")
    where = bin_.copy_whole(file, found.detail)
    tmp = file.with_name(f".{file.name}.tmp{os.getpid()}")
    tmp.write_text(owner)
    _fsync(tmp)
    os.replace(tmp, file)
    _fsync(file.parent)
    return _replace(found, "repaired", f"rewritten from the journal (run {owner}); was {where}")


def _hook_claimant(root: Path, token: str) -> str | None:
    """The unfinished run whose journal claims hook `token` (None: none does)."""
    world = _reader(root)
    if world is None:
        return None
    for family in _listdir(root / "runs"):
        try:
            loaded = load_family(world, family, full=True)
        except (WorldError, OSError, LookupError, TypeError, ValueError):
            continue
        for run in loaded.runs.values():
            if token in run.hooks and not run.finished:
                return run.id
    return None


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
    """`quarantine/<stamp>/` under the data directory, created on first use, with a note
    (`NOTE.txt`) of what each file there is."""

    def __init__(self, root: Path) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.root = root
        self.path = root / QUARANTINE / f"{stamp}-{os.getpid()}"

    def _target(self, file: Path, suffix: str = "") -> Path:
        target = self.path / (str(file.relative_to(self.root)) + suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def note(self, line: str) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / NOTE, "a", encoding="utf-8") as f:
            f.write(line.rstrip() + "\n")
            f.flush()
            os.fsync(f.fileno())

    def move(self, file: Path, why: str) -> str:
        target = self._target(file)
        os.replace(file, target)
        where = _rel(self.root, target)
        self.note(f"{_rel(self.root, file)}: moved here as {where} ({why})")
        return where

    def copy_whole(self, file: Path, why: str) -> str:
        target = self._target(file)
        shutil.copyfile(file, target)
        _fsync(target)
        where = _rel(self.root, target)
        self.note(f"{_rel(self.root, file)}: copied here as {where}, then rewritten ({why})")
        return where

    def copy_range(self, file: Path, data: bytes, offset: int) -> str:
        target = self._target(file, f".bytes-{offset}")
        target.write_bytes(data)
        _fsync(target)
        return _rel(self.root, target)

    def copy_tail(self, file: Path, offset: int) -> str:
        target = self._target(file, f".tail-{offset}")
        with open(file, "rb") as src:
            src.seek(offset)
            target.write_bytes(src.read())
        _fsync(target)
        where = _rel(self.root, target)
        self.note(f"{_rel(self.root, file)}: torn tail from offset {offset} cut, kept as {where}")
        return where


def _fsync(file: Path) -> None:
    fd = os.open(file, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
