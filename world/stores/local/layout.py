"""The layout of a data directory:

```
FORMAT                          {"format": "eve-world", "version": 3, "id": "<uuid>"}
runs/<root>/journal.msgpack     every record of the family (root run and its children)
runs/<root>/wal.msgpack         the write-ahead file: commits not yet in the files (`wal`)
runs/<root>/inbox.msgpack       deliveries, appended by any process under inbox.lock
runs/<root>/head.msgpack        status cache, one checksummed frame (the journal is the truth)
runs/<root>/owner.lock          the family lease (flock: free the moment its owner dies)
hooks/<token>                   an active hook; holds the owning run id (O_EXCL = claim)
streams/<name>.msgpack (+.idx)  named streams
```

What a data directory's FORMAT file says, and whether the files under it agree: one reading
for `LocalWorld`'s open and for `verify`/`repair`, so the open's error and `eve doctor` give
the same verdict and the same advice.

FORMAT is ``{"format": "eve-world", "version": 3, "id": …}``; ``id`` names the store, made
once when it is created (one made before it had ids gets one at its next open for writing)
and kept by every rewrite of FORMAT (a migration, a repair). A version the files contradict
is damage, not a store of another format: every family's record of its streams
(``streams.list``) is written only by format 2 and later, so a FORMAT saying 1 over such files
is not migrated (the migration would read format-2 files as format 1) but rewritten by a repair; a
version no eve ever wrote (not a positive integer, the key misspelled) is damage too. A
version above this eve's is a newer eve's store, unless the files are all in this format's
forms and hold its records: then it is a damaged byte, and the repair says what it does
before it does it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import filelock

from ... import _journal
from ..._errors import CorruptJournalError, StoreFormatError
from .files import guard

# Version 3: a family's write-ahead file may hold commits its other files do not have yet
# (`wal`): an eve that does not replay it must refuse the store. Version 2: the format frozen
# for 0.1 (every file kind in one form, see `_journal`), the same files and forms as 3; a
# store of version 1 holds pre-release forms, which this version does not read.
FORMAT_VERSION = 3
# The forms of records, deliveries and stream items (format 2's, unchanged by 3): what a
# PostgreSQL schema holds too (`postgres.schema.STORE_FORMAT`; it has no write-ahead files).
FORMS_VERSION = 2
FORMAT = {"format": "eve-world", "version": FORMAT_VERSION}
# Written only by format 2 and later (a family's record of its streams, `_stream_record.RECORD`).
_FORMAT_2_FILE = "streams.list"
# A store id as FORMAT holds it; found even in a FORMAT damaged elsewhere (a repair keeps it).
_ID = re.compile(r'"id"\s*:\s*"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"')


@dataclass(frozen=True)
class FormatReading:
    """``state``: ok | older (to migrate) | newer | damaged | missing | foreign (not an eve
    FORMAT, in a folder that is no store either); ``version`` as written (an int) or None;
    ``detail``: one line saying what was found (and, when damaged, why)."""

    state: str
    version: int | None
    detail: str


def read_format(path: Path) -> FormatReading:
    """The verdict on ``path``'s FORMAT (``path``: a data directory)."""
    file = path / "FORMAT"
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return FormatReading("missing", None, "missing; rewritten on the next open")
    is_store = (path / "runs").is_dir()
    try:
        found = json.loads(raw)
    except ValueError:
        return _damaged("not JSON") if is_store else FormatReading("foreign", None, "not JSON")
    if not isinstance(found, dict) or found.get("format") != FORMAT["format"]:
        if is_store:
            return _damaged("not an eve-world FORMAT file")
        return FormatReading("foreign", None, "not an eve-world FORMAT file")
    version = found.get("version")
    if "version" not in found:
        return _damaged("it has no version")
    if type(version) is not int or version < 1:
        return _damaged(f"version {version!r} is none an eve ever wrote")
    if version == FORMAT_VERSION:
        return FormatReading("ok", version, f"version {version}")
    if version < FORMAT_VERSION:
        if version < 2 and written_by_format_2(path):
            return _damaged(f"it says version {version}, but its files are format 2 or later")
        return FormatReading("older", version, f"version {version}: migrated on the next open")
    return FormatReading(
        "newer", version, f"version {version}: written by a newer eve (this one reads "
        f"{FORMAT_VERSION}); if no newer eve wrote it, FORMAT is damaged"
    )  # fmt: skip


def store_id(path: Path) -> str | None:
    """The id of the store at ``path`` (a data directory), as its FORMAT says; None when it
    has none (yet) or no FORMAT."""
    try:
        raw = (path / "FORMAT").read_bytes()
    except OSError:
        return None
    found = _ID.search(raw.decode("utf-8", "replace"))
    return found.group(1) if found else None


def format_text(keep: str | None) -> bytes:
    """What FORMAT holds: this format and the store id ``keep`` (a new one when None)."""
    return (json.dumps({**FORMAT, "id": keep or str(uuid.uuid4())}) + "\n").encode()


def _damaged(why: str) -> FormatReading:
    return FormatReading("damaged", None, f"damaged: {why}")


def written_by_format_2(path: Path) -> bool:
    """Whether any family of the store at ``path`` has a file only format 2 and later write."""
    runs = path / "runs"
    try:
        roots = os.listdir(runs)
    except OSError:
        return False
    return any(os.path.exists(runs / root / _FORMAT_2_FILE) for root in roots)


def old_format_error(fmt: Path, version: int) -> StoreFormatError:
    """The one line for a store whose FORMAT is older than :data:`FORMAT`, met where it is
    not migrated (`verify`, `repair`; a version no migration starts from): nothing changed."""
    if version in range(1, FORMAT_VERSION):
        return StoreFormatError(
            f"{fmt}: store format {version} is older than this version's ({FORMAT_VERSION}) "
            "and is not checked as it is; opening the store migrates it (nothing was changed)"
        )
    return StoreFormatError(
        f"{fmt}: store format {version!r} is not one this version reads or migrates from; "
        "nothing was changed"
    )


def default_data_dir() -> Path:
    """`$EVE_DATA_DIR`, else `./.workflow-data` (the one default: the runtime and CLI use it)."""
    return Path(os.environ.get("EVE_DATA_DIR") or ".workflow-data").expanduser()


def open_format(path: Path, *, create: bool) -> int | None:
    """Check the FORMAT of the data directory `path` as an open does: a damaged one, or one
    a newer eve wrote, raises; a missing one is written (with the folders) when `create`.
    The older format version to migrate from, or None."""
    fmt = path / "FORMAT"
    with guard(path, "opening the data directory"):
        if fmt.exists() and not _unwritten_format(path, fmt):
            reading = read_format(path)
            if reading.state in ("damaged", "foreign"):  # a repair rewrites it
                what = (
                    f"the store's FORMAT file is {reading.detail}"
                    if reading.state == "damaged"
                    else "not an eve data directory (bad FORMAT file)"
                )
                raise CorruptJournalError(str(fmt), 0, "bad FORMAT", what=what)
            if reading.state == "newer":
                raise StoreFormatError(
                    f"{fmt}: written by a newer eve (version {reading.version}; this one "
                    f"reads {FORMAT_VERSION}): open it with that eve; if none wrote it, "
                    "the file is damaged: `eve doctor --repair` rewrites it"
                )
            if reading.state == "older":
                assert reading.version is not None
                return reading.version
            if create and store_id(path) is None:
                _name_store(path)
            return None
        if not create:
            return None
        _journal.make_dirs(path)
        for sub in ("runs", "hooks", "streams"):
            with contextlib.suppress(FileExistsError):
                (path / sub).mkdir()
        # FORMAT is written last, durable (its data, then its entry with the folders'):
        # a store is one once it has FORMAT, and a cut never leaves it empty. Two processes
        # creating it at once: the first FORMAT stays (one store id).
        _write_format(path, store_id(path), first=not fmt.exists())
    return None


def _name_store(path: Path) -> None:
    """Give the store at ``path``, made before stores had ids, its id: once, under the lock
    a migration takes (two processes opening it at once agree on one)."""
    with filelock.FileLock(str(path / "migrate.lock"), timeout=60, preserve_lock_file=True):
        if store_id(path) is None and read_format(path).state == "ok":
            _write_format(path, None, first=False)


def _write_format(path: Path, keep: str | None, *, first: bool) -> None:
    fmt = path / "FORMAT"
    tmp = fmt.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _journal.write_all(fd, format_text(keep), 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    if first:
        # Another process that created the store meanwhile: its FORMAT (and id) stays.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, fmt)
        os.unlink(tmp)
    else:
        os.replace(tmp, fmt)
    _journal.fsync_dir(path)


def _unwritten_format(path: Path, fmt: Path) -> bool:
    """Whether `fmt` is a FORMAT whose write a power cut undid (empty, or zeros), written
    by an eve that did not fsync it, in a folder laid out as a store: it is written again
    (a read-only open takes it as it would be)."""
    return not fmt.read_bytes().strip(b"\0") and (path / "runs").is_dir()
