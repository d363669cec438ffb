"""What a `LocalWorld` process has checked of a family's files (`LocalWorld.check_intact`):
each file's end checked whole, the bytes just before it and their crc32, so a family is
read back and parsed once per process, and a head can say how far an earlier process checked.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from typing import Any

from ... import _journal
from ..._errors import StorageError, os_reason
from .files import read_from


class CheckedFiles:
    """How far each file is known intact, in this process."""

    def __init__(self, prefix: int) -> None:
        # file -> (inode, end checked whole, the bytes just before that end, their crc32)
        self.known: dict[str, tuple[int, int, bytes, int]] = {}
        self.checked: dict[str, list[str]] = {}  # family -> the files `check_intact` checks
        self.prefix = prefix  # the length of the data directory's path: a file's name within

    def check(self, path: str, hints: Callable[[], Any]) -> _journal.ReadResult | None:
        """The frames of `path` not checked before, checked (None: no file): after what this
        process checked (known by inode, end and the bytes just before it: a file removed and
        made again may get the same inode), else after its hint (`[end, crc]`) in what
        `hints()` gives (a head's `note`: asked only then, by file name) if the crc of the
        bytes before its end still holds, else all of them."""
        known = self.known.get(path)
        try:
            if known is not None and known[1]:  # the usual case: what was added since alone
                st, data = read_from(path, known[1] - len(known[2]))
                ino, (_, end, tail, crc) = st.st_ino, known
                if ino == known[0] and data[: len(tail)] == tail:
                    return self._after(path, ino, end, crc, data[len(tail) :], tail)
            with open(path, "rb") as f:
                ino = os.fstat(f.fileno()).st_ino
                hint = hints()
                hint = hint.get(path[self.prefix :]) if isinstance(hint, dict) else None
                if (
                    isinstance(hint, list)
                    and len(hint) == 2
                    and all(isinstance(v, int) for v in hint)
                ):
                    prefix = f.read(hint[0])
                    if len(prefix) == hint[0] and zlib.crc32(prefix) == hint[1]:
                        rest = f.read()
                        return self._after(path, ino, hint[0], hint[1], rest, prefix)
                    f.seek(0)
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"{path}: cannot read: {os_reason(exc)}") from None
        return self._after(path, ino, 0, 0, data, b"")

    def _after(
        self, path: str, ino: int, end: int, crc: int, rest: bytes, before: bytes
    ) -> _journal.ReadResult:
        """Check the frames of `rest` (the file from `end` on; `before`: bytes before it, `crc`
        theirs) and remember how far the file is checked."""
        result = _journal.parse(rest, end, path, decode=False)
        upto = result.end - end
        crc = zlib.crc32(rest[:upto], crc)
        last = (before[-32:] + rest[:upto])[-32:] if result.end else b""
        if len(self.known) >= 4096:
            self.known.clear()
        self.known[path] = (ino, result.end, bytes(last), crc)
        return result

    def wrote(self, path: str, ino: int, at: int, data: bytes) -> None:
        """This process wrote the frames `data` at `at` of `path` (inode `ino`): if the file
        was checked up to there, it is checked up to after them, so the next `check_intact`
        does not read back and parse what this process framed itself (only their crc32 is
        added). What a power cut may have done to them is still found by a new process: it
        believes a head's note only where the crc of the bytes on disk matches it."""
        known = self.known.get(path)
        if known is not None and known[0] == ino and known[1] == at and at:
            tail = (known[2] + data[-32:])[-32:]  # (not a copy of all of `data`)
            self.known[path] = (ino, at + len(data), tail, zlib.crc32(data, known[3]))

    def note(self, root: str) -> dict[str, list[int]]:
        """What this process checked of the family's files, for its head (`check_intact`)."""
        out: dict[str, list[int]] = {}
        for path in self.checked.get(root, ()):
            known = self.known.get(path)
            if known is not None and known[1]:
                out[path[self.prefix :]] = [known[1], known[3]]
        return out
