"""A `LocalWorld`'s inboxes: where the next delivery goes, where an inbox ends (an id: ids are
positions plus the file's shift, which a compaction sets), and reading deliveries."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from ... import _journal
from ..._errors import CorruptJournalError
from ..._world import InboxItem, check_run_id, inbox_item
from .files import read_from


class InboxEnds:
    """The inbox ends this process knows, by family."""

    def __init__(self, runs: Path) -> None:
        self.runs = str(runs)
        self.ends: dict[str, int] = {}  # the end after this process's last delivery
        self.paths: dict[str, str] = {}
        self.shifts: dict[str, tuple[tuple[int, int, int], int]] = {}

    def forget(self, root: str) -> None:
        for cache in (self.ends, self.paths, self.shifts):
            cache.pop(root, None)

    def valid_end(self, root: str, path: str, head_next: Any) -> tuple[int, int]:
        """Where the next delivery goes (the file position after the last complete record)
        and the file's shift (id = position + shift); under `inbox.lock`. `head_next`: the
        `inbox_next` of the family's head, read when this process delivered nothing to it yet."""
        try:
            st, shift = _layout(path)
        except FileNotFoundError:
            return 0, 0
        size = st.st_size
        # Where a valid record ends: this process's last delivery, else the end of the last
        # delivery the owner read (the head), so a new process does not parse every delivery.
        known = self.ends.get(root) or head_next
        known = known - shift if isinstance(known, int) else 0
        if 0 < known == size:  # nothing after it (the lock is held: no one appends)
            return known, shift
        if 0 < known <= size:
            with contextlib.suppress(CorruptJournalError):
                result = _journal.read_file(path, known)
                if result.end > known or result.end == size:
                    return result.end, shift
        return _journal.read_file(path).end, shift

    def end(self, root: str) -> int:
        """The inbox's end as an id (its size plus its shift); 0 without an inbox."""
        path = self.paths.get(root)
        if path is None:  # a turn asks at every step: the path is built once
            path = os.path.join(self.runs, check_run_id(root), "inbox.msgpack")
            if len(self.paths) > 4096:
                self.paths.clear()
                self.shifts.clear()
            self.paths[root] = path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return 0
        # The end as an id: the size plus the file's shift, read again when the file changed
        # (a delivery, or a compaction's rename).
        known = self.shifts.get(root)
        if known is not None and known[0] == (st.st_ino, st.st_size, st.st_mtime_ns):
            return st.st_size + known[1]
        try:
            st, shift = _layout(path)
        except FileNotFoundError:
            return 0
        self.shifts[root] = ((st.st_ino, st.st_size, st.st_mtime_ns), shift)
        return st.st_size + shift


def _layout(path: str) -> tuple[os.stat_result, int]:
    """The inbox file's status and shift (once a delivery, once a drive)."""
    st, header = read_from(path, 0, _journal.HEADER_MAX)
    return st, _journal.inbox_layout(header)[0]


def read_inbox_file(path: str, start: int) -> tuple[list[InboxItem], int]:
    """The deliveries of the inbox file `path` with id >= `start`, and where to read on."""
    if not os.path.exists(path):
        return [], start
    result = None
    if start > 0:
        with contextlib.suppress(CorruptJournalError):
            result = _journal.read_inbox_file(path, start)
    if result is None:
        result = _journal.read_inbox_file(path, 0)
    items = [
        item
        for (pos, rec), crc in zip(result.records, result.crcs, strict=True)
        if pos >= start and (item := inbox_item(pos, rec, crc)) is not None
    ]
    return items, max(result.end, start)
