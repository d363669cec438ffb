"""What a power cut may leave of a folder: crash states built from what was synced.

:class:`Disk` watches every ``os.fsync`` / ``os.fdatasync`` of this process. Just before each
one (a *moment*) it notes the folder as it is then, with what is durable so far: each file's
content at its last sync, each directory's entries at its last sync. A crash state of a moment
is what the POSIX minimum allows a cut there to leave:

- a directory holds the entries it had at its last sync (none if never synced; a file
  created, renamed or removed since is as it was then), or, as a disk may, all it has now;
- a file holds its content at its last sync (nothing if never synced), or all its writes
  since, or that content followed by zeros up to its size now (ext4 keeps a size whose
  pages it has not written: they read as zeros).

Each file and directory is chosen independently (so one stream may survive further than
another its items refer to); :meth:`Disk.states` gives the two extremes and seeded mixes.
"""

from __future__ import annotations

import errno
import os
import random
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class Moment:
    """The folder just before one sync (relative paths; "" is the folder itself)."""

    number: int
    files: dict[str, tuple[int, bytes]]  # path -> (inode, content now)
    dirs: dict[str, dict[str, int]]  # path -> {entry: inode} now
    durable: dict[int, bytes]  # inode -> content at its last sync
    entries: dict[str, dict[str, int]]  # path -> {entry: inode} at its last sync
    label: str = ""  # what the workload was doing (see Disk.mark)


@dataclass
class Disk:
    root: Path
    moments: list[Moment] = field(default_factory=list)
    durable: dict[int, bytes] = field(default_factory=dict)
    entries: dict[str, dict[str, int]] = field(default_factory=dict)
    label: str = ""
    _last: tuple[object, ...] = ()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Watch syncs from now on (until the monkeypatch is undone). The folder itself
        is taken as durable in its parent (a test made it)."""
        self.root = Path(os.path.realpath(self.root))
        real_fsync, real_fdatasync = os.fsync, os.fdatasync

        def fsync(fd: int) -> None:
            self._before(fd)
            real_fsync(fd)
            self._after(fd)

        def fdatasync(fd: int) -> None:
            self._before(fd)
            real_fdatasync(fd)
            self._after(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fdatasync)

    def mark(self, label: str) -> int:
        """Note what the workload does next; returns the number of moments so far (a turn
        acknowledged now must survive every later moment)."""
        self.label = label
        self.capture()
        return len(self.moments)

    def _rel(self, fd: int) -> str | None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path != str(self.root) and not path.startswith(str(self.root) + os.sep):
            return None
        return os.path.relpath(path, self.root) if path != str(self.root) else ""

    def _before(self, fd: int) -> None:
        if self._rel(fd) is not None:
            self.capture()

    def _after(self, fd: int) -> None:
        rel = self._rel(fd)
        if rel is None:
            return
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            self.entries[rel] = _listing(self.root / rel)
        else:
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                self.durable[st.st_ino] = f.read()

    def capture(self) -> None:
        """Note a moment now (if anything changed since the last one)."""
        files: dict[str, tuple[int, bytes]] = {}
        dirs: dict[str, dict[str, int]] = {}
        for path, names, others in os.walk(self.root):
            rel = os.path.relpath(path, self.root)
            rel = "" if rel == "." else rel
            dirs[rel] = _listing(Path(path))
            for name in others:
                full = os.path.join(path, name)
                try:
                    with open(full, "rb") as f:
                        files[os.path.join(rel, name)] = (os.fstat(f.fileno()).st_ino, f.read())
                except FileNotFoundError:
                    continue
            names.sort()
        shape = tuple(sorted((p, ino, len(b)) for p, (ino, b) in files.items()))
        shape += tuple(sorted((p, len(e), 0) for p, e in dirs.items()))
        synced = (len(self.durable), sum(len(b) for b in self.durable.values()))
        listed = tuple(sorted((d, tuple(sorted(e.items()))) for d, e in self.entries.items()))
        key = (*shape, ("", *synced), listed)
        if key == self._last:
            return
        self._last = key
        entries = {k: dict(v) for k, v in self.entries.items()}
        moment = Moment(len(self.moments), files, dirs, dict(self.durable), entries, self.label)
        self.moments.append(moment)

    def states(self, moment: Moment, mixes: int, seed: int) -> Iterator[tuple[str, Choice]]:
        """``(name, choice)`` of the crash states to try at ``moment``: everything synced
        only, everything as it is now, and ``mixes`` seeded mixes."""
        yield "synced", Choice(lambda _: "synced", lambda _: False)
        yield "current", Choice(lambda _: "current", lambda _: True)
        for n in range(mixes):
            rng = random.Random(f"{seed}:{moment.number}:{n}")
            yield (
                f"mix{n}",
                Choice(
                    lambda _, r=rng: r.choice(("synced", "current", "zeros")),  # type: ignore[misc]
                    lambda _, r=rng: r.random() < 0.5,  # type: ignore[misc]
                ),
            )

    def build(self, moment: Moment, choice: Choice, target: Path) -> None:
        """Write the crash state ``choice`` picks at ``moment`` into ``target``."""
        by_ino = {ino: data for ino, data in moment.files.values()}
        target.mkdir(parents=True)

        def walk(rel: str) -> None:
            now = moment.dirs.get(rel, {})
            names = now if choice.dir_now(rel) else moment.entries.get(rel, {})
            for name, ino in sorted(names.items()):
                child = os.path.join(rel, name)
                if child in moment.dirs:
                    (target / child).mkdir()
                    walk(child)
                    continue
                synced = moment.durable.get(ino, b"")
                current = by_ino.get(ino, synced)
                how = choice.file(child)
                if how == "current":
                    data = current
                elif how == "zeros" and len(current) > len(synced):
                    data = synced + bytes(len(current) - len(synced))
                else:
                    data = synced
                (target / child).write_bytes(data)

        walk("")


@dataclass
class Choice:
    file: Callable[[str], str]  # "synced" | "current" | "zeros", for a file
    dir_now: Callable[[str], bool]  # a directory's entries as now (else as last synced)


def _listing(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in os.scandir(path):
        try:
            out[entry.name] = entry.inode()
        except FileNotFoundError:
            continue
    return out


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a tmpfs in CI: {done.stderr.decode().strip()}")
        pytest.skip("mounting a small tmpfs needs root (CI runs it)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of `disk`; returns the file holding them."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        block = bytes(64 << 10)
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return filler
