"""Which families have a run parked on a timer: a hint file a server watches, so it re-reads
only those heads when another process put a run to sleep (`World.timers_since`).

The roots whose heads were written with a run parked on a timer, one a line, appended (not
fsync'd: a hint); the version is the file's inode and size. Past `TIMERS_ROTATE` bytes a writer
starts it afresh (a new inode: a reader then reads every head once).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Hashable
from pathlib import Path

from .watch import DirWatcher, touched

TIMERS_FILE = "timers"
TIMERS_ROTATE = 1 << 20


class TimerNotes:
    """The hint file `timers` of one data directory."""

    def __init__(self, path: Path, *, create: bool) -> None:
        self.file = os.path.join(os.path.realpath(path), TIMERS_FILE)
        self.create = create

    def note(self, root: str) -> None:
        """Say that `root` has a run parked on a timer (`timers_since`): a hint, never
        fsync'd; a server that misses it finds the timer when it next reads every head."""
        with contextlib.suppress(OSError):  # a full disk is said by the writes that matter
            fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                if os.fstat(fd).st_size >= TIMERS_ROTATE:
                    os.close(fd)
                    fresh = f"{self.file}.{os.getpid()}.{threading.get_ident()}"
                    os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
                    os.replace(fresh, self.file)
                    fd = os.open(self.file, os.O_WRONLY | os.O_APPEND, 0o644)
                os.write(fd, f"{root}\n".encode())  # one short append: whole or not at all
            finally:
                os.close(fd)
            touched(self.file)

    def version(self) -> Hashable:
        try:
            stat = os.stat(self.file)
        except FileNotFoundError:
            if not self.create or not os.path.isdir(os.path.dirname(self.file)):
                return (0, 0)
            # Made now, so the version names a file whose later notes `timers_since` reads.
            with contextlib.suppress(OSError):
                os.close(os.open(self.file, os.O_WRONLY | os.O_CREAT, 0o644))
            return self.version() if os.path.exists(self.file) else (0, 0)
        except OSError:
            return (0, 0)
        return (stat.st_ino, stat.st_size)

    def since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        try:
            with open(self.file, "rb") as f:
                stat = os.fstat(f.fileno())
                now = (stat.st_ino, stat.st_size)
                was = version if isinstance(version, tuple) and len(version) == 2 else (-1, -1)
                start = int(was[1]) if was[0] == now[0] else -1
                if not 0 <= start <= stat.st_size:
                    return now, None  # started afresh since, or another file: read every head
                f.seek(start)
                data = f.read(stat.st_size - start)
        except FileNotFoundError:
            return (0, 0), ([] if version == (0, 0) else None)
        except OSError:
            return version, None
        whole = data.rfind(b"\n") + 1  # a line being appended is read next time
        roots = data[:whole].decode("utf-8", "replace").split()
        return (now[0], start + whole), sorted(set(roots))

    async def wait(self, version: Hashable, timeout: float) -> bool:
        folder = Path(os.path.dirname(self.file))
        with DirWatcher(folder, [TIMERS_FILE]) as watcher:
            # Watching began before this check: a change after it is seen by `wait`.
            deadline = time.monotonic() + timeout
            while self.version() == version:
                if not await watcher.wait(deadline - time.monotonic()):
                    return self.version() != version
        return True
