"""Fault injection for crash and disk-error tests, driven by the `EVE_FAULTS` variable.

`EVE_FAULTS` is parsed once at import; when it is unset nothing here costs anything but one
boolean test per journal write. Syntax: comma-separated `name@N` (N counts from 1 and
defaults to 1), counted per process over journal writes (every durable append: journal and
inbox records) or journal reads:

    crash_before_write@N   SIGKILL this process just before the Nth write
    crash_mid_write@N      write the first half of the Nth write's bytes, fsync, SIGKILL
    crash_after_fsync@N    SIGKILL right after the Nth write is fsync'd
    enospc@N               the Nth write stores half its bytes, then fails with ENOSPC
    eio_write@N            the same with EIO
    eio_read@N             the Nth journal read fails with EIO
    crash_compact_written@N  SIGKILL when the Nth inbox compaction has its new file fsync'd
    crash_compact_renamed@N  SIGKILL right after the Nth compaction renamed it into place
    crash_migrate_staged@N     SIGKILL when a store migration has staged its Nth family
    crash_migrate_committed    SIGKILL right after a store migration's commit point
    crash_migrate_moved@N      SIGKILL when a migration moved its Nth family's files in place

Example: `EVE_FAULTS=crash_mid_write@3,eio_read@2`.
"""

from __future__ import annotations

import errno
import os
import signal

WRITE_FAULTS = frozenset(
    {"crash_before_write", "crash_mid_write", "crash_after_fsync", "enospc", "eio_write"}
)
READ_FAULTS = frozenset({"eio_read"})
COMPACT_FAULTS = frozenset({"crash_compact_written", "crash_compact_renamed"})
MIGRATE_FAULTS = frozenset(
    {"crash_migrate_staged", "crash_migrate_committed", "crash_migrate_moved"}
)


def parse(spec: str) -> dict[str, int]:
    """Parse an `EVE_FAULTS` value into {fault name: N}; unknown names raise ValueError."""
    faults: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, count = part.partition("@")
        if name not in WRITE_FAULTS | READ_FAULTS | COMPACT_FAULTS | MIGRATE_FAULTS:
            raise ValueError(f"EVE_FAULTS: unknown fault {name!r} in {spec!r}")
        if count and not count.isdigit():
            raise ValueError(f"EVE_FAULTS: {part!r} needs a positive count after '@'")
        faults[name] = int(count or "1")
    return faults


FAULTS = parse(os.environ.get("EVE_FAULTS", ""))
ACTIVE = bool(FAULTS)
_counts = {"write": 0, "read": 0, "compact": 0}


def next_write() -> str | None:
    """Count one durable write; return the fault to inject into it, if any."""
    _counts["write"] += 1
    n = _counts["write"]
    for name, at in FAULTS.items():
        if at == n and name in WRITE_FAULTS:
            return name
    return None


def next_read() -> str | None:
    """Count one journal read; return the fault to inject into it, if any."""
    _counts["read"] += 1
    n = _counts["read"]
    for name, at in FAULTS.items():
        if at == n and name in READ_FAULTS:
            return name
    return None


def compact_point(stage: str) -> None:
    """At compaction `stage` ("written", "renamed"; "written" counts one compaction), die if
    `crash_compact_<stage>@N` names this compaction."""
    if stage == "written":
        _counts["compact"] += 1
    if FAULTS.get(f"crash_compact_{stage}") == _counts["compact"]:
        kill_self()


def before_file_write(fault: str | None, fd: int, data: bytes, offset: int) -> None:
    """Inject write fault `fault` (from `next_write`) into writing `data` at `offset` of file
    `fd`, as a disk or a crash would: die before it, write half and raise the disk's error,
    or write half, make it durable and die. Any other fault (or None): nothing, the caller
    writes."""
    if fault == "crash_before_write":
        kill_self()
    if fault in ("enospc", "eio_write"):
        os.pwrite(fd, data[: len(data) // 2], offset)
        code = errno.ENOSPC if fault == "enospc" else errno.EIO
        raise OSError(code, os.strerror(code))
    if fault == "crash_mid_write":
        os.pwrite(fd, data[: len(data) // 2], offset)
        os.fdatasync(fd)
        kill_self()


def kill_self() -> None:
    """Die the way `kill -9` kills: no cleanup, no flush, no atexit."""
    os.kill(os.getpid(), signal.SIGKILL)


def migrate_point(stage: str, n: int) -> None:
    """At a store migration's `stage` ("staged", "committed", "moved") for its `n`th family
    (1 for "committed"), die if `crash_migrate_<stage>@n` is set."""
    if FAULTS.get(f"crash_migrate_{stage}") == n:
        kill_self()
