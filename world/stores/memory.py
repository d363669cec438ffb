"""`MemoryWorld`: the whole world in one process's memory, for tests.

Every value still goes through the same codec and record framing as on disk, so a test on
`MemoryWorld` catches a value that could not be stored.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from .. import _codec, _journal
from .._errors import (
    HookConflictError,
    OwnershipError,
    RunExistsError,
    RunNotFoundError,
    WorldError,
)
from .._family import parks_on_timer
from .._records import StoredRecord
from .._signals import Signals, wait_set
from .._store import RECORD, Order, Store
from .._world import (
    FamilyLog,
    FamilyUsage,
    InboxItem,
    Lease,
    check_name,
    check_run_id,
    inbox_item,
    inbox_record,
    root_of,
    stream_family,
)


@dataclass
class _Family:
    frames: list[bytes]
    head: bytes | None = None
    inbox: list[bytes] = field(default_factory=list)
    owner: object | None = None
    written: float = field(default_factory=time.time)


class _MemoryLease(Lease):
    def __init__(self, world: MemoryWorld, root: str) -> None:
        self._world, self._root = world, root

    def release(self) -> None:
        self._world._release(self._root, self)


class MemoryWorld(Store):
    """An in-memory world: nothing survives the process, everything else behaves the same."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._hooks: dict[str, str] = {}
        self._streams: dict[str, list[bytes]] = {}
        self._stream_written: dict[str, float] = {}
        self._lock = threading.RLock()
        self._signals = Signals()
        self._timers: list[str] = []  # roots of heads written with a run on a timer

    def _family(self, root: str) -> _Family:
        family = self._families.get(root)
        if family is None:
            raise RunNotFoundError(f"no run family {root!r}")
        return family

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
            return self._fork(root, bodies, streams or {}, hooks or {})
        frames = [_journal.frame_body(body) for body in bodies]
        with self._lock:
            if root in self._families:
                raise RunExistsError(f"run {root!r} already exists")
            header = _journal.frame(_journal.header())
            self._families[root] = _Family(frames=[header, *frames])
            return list(range(1, len(frames) + 1))

    def _fork(
        self,
        root: str,
        bodies: list[bytes],
        streams: Mapping[str, tuple[str, int]],
        hooks: Mapping[str, str],
    ) -> list[int]:
        check_run_id(root)
        frames = [_journal.frame_body(body) for body in bodies]
        with self._lock:  # all at once: no one sees a part of it
            if root in self._families:
                raise RunExistsError(f"run {root!r} already exists")
            for token, run_id in hooks.items():
                owner = self._hooks.get(token, run_id)
                if owner != run_id:
                    raise HookConflictError(f"hook token {token!r} is owned by run {owner}")
            copies = {}
            for name, (source, n) in streams.items():
                check_name(name, "stream name")
                items = self._streams.get(source, [])
                if len(items) < n:
                    raise WorldError(f"stream {source!r} holds {len(items)} items, not {n}")
                copies[name] = list(items[:n])  # frames are bytes: nothing shared changes
            now = time.time()
            for name, kept in copies.items():
                self._streams[name] = kept
                self._stream_written[name] = now
            self._hooks.update(hooks)
            header = _journal.frame(_journal.header())
            self._families[root] = _Family(frames=[header, *frames])
            return list(range(1, len(frames) + 1))

    def families(self) -> list[str]:
        with self._lock:
            return sorted(self._families)

    def family_exists(self, root: str) -> bool:
        return root in self._families

    def family_usage(self, root: str, *, streams: Sequence[str] | None = None) -> FamilyUsage:
        check_run_id(root)
        wanted = set(streams) if streams is not None else None
        with self._lock:
            family = self._families.get(root)
            size, last = 0, 0.0
            if family is not None:
                size = sum(map(len, family.frames)) + len(family.head or b"")
                size += sum(map(len, family.inbox))
                last = family.written
            for name, frames in self._streams.items():
                if (name in wanted) if wanted is not None else stream_family(name) == root:
                    size += sum(map(len, frames))
                    last = max(last, self._stream_written.get(name, 0.0))
        return FamilyUsage(size, last)

    def stream_names(self, *, family: str | None = None) -> list[str]:
        with self._lock:
            return sorted(n for n in self._streams if family in (None, stream_family(n)))

    def remnants(self) -> list[str]:
        with self._lock:
            roots = {stream_family(name) for name in self._streams}
            roots |= {root_of(owner) for owner in self._hooks.values()}
            return sorted(r for r in roots if r is not None and r not in self._families)

    def remove_family(self, root: str, *, inbox_mark: int | None = None) -> bool:
        check_run_id(root)
        with self._lock:
            family = self._families.get(root)
            if family is not None and inbox_mark is not None and len(family.inbox) != inbox_mark:
                return False
            for token in [t for t, owner in self._hooks.items() if root_of(owner) == root]:
                del self._hooks[token]
            for name in [n for n in self._streams if stream_family(n) == root]:
                del self._streams[name]
                self._stream_written.pop(name, None)
            self._families.pop(root, None)
        self._signals.fire(f"inbox:{root}")  # a waiter on it wakes and finds no family
        return True

    def load(self, root: str, start: int = 0) -> FamilyLog:
        with self._lock:
            frames = list(self._family(root).frames)
        first = start if 1 <= start < len(frames) else 1
        data = b"".join(frames[first:])
        parsed = _journal.parse(data, 0, f"memory:{root}")
        records = [(first + i, rec) for i, (_, rec) in enumerate(parsed.records)]
        return FamilyLog(
            records=cast("list[tuple[int, StoredRecord]]", records), start=first if first > 1 else 0
        )

    def append(self, root: str, bodies: list[bytes], order: Order = RECORD) -> list[int]:
        frames = [_journal.frame_body(body) for body in bodies]
        with self._lock:
            family = self._family(root)
            first = len(family.frames)
            family.frames.extend(frames)
            family.written = time.time()
            return list(range(first, first + len(frames)))

    def read_head(self, root: str) -> dict[str, Any] | None:
        with self._lock:
            data = self._family(root).head
        if data is None:
            return None
        head = _codec.decode(data)
        return head if isinstance(head, dict) else None

    def write_head(self, root: str, head: dict[str, Any]) -> None:
        data = _codec.encode(head, "head")
        timer = parks_on_timer(head)
        with self._lock:
            family = self._family(root)
            family.head, family.written = data, time.time()
            if timer:
                self._timers.append(root)
        if timer:
            self._signals.fire("timers")

    def timers_version(self) -> Hashable:
        return len(self._timers)

    def timers_since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        with self._lock:
            now = len(self._timers)
            if not isinstance(version, int) or not 0 <= version <= now:
                return now, None
            return now, sorted(set(self._timers[version:]))

    async def wait_timers(self, version: Hashable, timeout: float) -> bool:
        event = self._signals.event("timers")
        try:
            if self.timers_version() != version:
                return True
            if not await wait_set(event, timeout):
                return self.timers_version() != version
            return True
        finally:
            self._signals.drop("timers", event)

    # -- inbox -------------------------------------------------------------------------------
    def deliver(self, root: str, token: str, payload: Any) -> int:
        frame = _journal.frame(inbox_record(token, payload, self.now()), "payload")
        with self._lock:
            family = self._family(root)
            inbox = family.inbox
            inbox.append(frame)
            family.written = time.time()
            item_id = len(inbox) - 1
        self._signals.fire(f"inbox:{root}")
        return item_id

    def read_inbox(self, root: str, start: int = 0) -> tuple[list[InboxItem], int]:
        start = max(start, 0)
        with self._lock:
            frames = self._family(root).inbox[start:]
        parsed = _journal.parse(b"".join(frames), 0, f"memory:{root}:inbox")
        items = [
            item
            for i, ((_, rec), crc) in enumerate(zip(parsed.records, parsed.crcs, strict=True))
            if (item := inbox_item(start + i, rec, crc)) is not None
        ]
        return items, start + len(frames)

    def inbox_end(self, root: str) -> int:
        with self._lock:
            return len(self._family(root).inbox)

    # -- hooks -------------------------------------------------------------------------------
    def claim_hook(self, token: str, run_id: str) -> str:
        check_name(token, "hook token")
        with self._lock:
            return self._hooks.setdefault(token, run_id)

    def hook_owner(self, token: str) -> str | None:
        check_name(token, "hook token")
        return self._hooks.get(token)

    def release_hook(self, token: str, run_id: str) -> None:
        with self._lock:
            if self._hooks.get(token) == run_id:
                del self._hooks[token]

    # -- ownership and wake-ups --------------------------------------------------------------
    def acquire(self, root: str, wait: float | None = None) -> Lease:
        deadline = time.monotonic() + (wait or 0.0)
        lease = _MemoryLease(self, root)
        while True:
            with self._lock:
                family = self._family(root)
                if family.owner is None:
                    family.owner = lease
                    return lease
            if time.monotonic() >= deadline:
                raise OwnershipError(f"run family {root!r} is owned by another engine")
            time.sleep(0.01)

    def _release(self, root: str, lease: _MemoryLease) -> None:
        with self._lock:
            family = self._families.get(root)
            if family is not None and family.owner is lease:
                family.owner = None

    async def wait_inbox(self, root: str, mark: int, timeout: float) -> bool:
        key = f"inbox:{root}"
        event = self._signals.event(key)
        try:
            if self.inbox_end(root) != mark:
                return True
            if not await wait_set(event, timeout):
                return self.inbox_end(root) != mark
            return True
        finally:
            self._signals.drop(key, event)

    # -- streams -----------------------------------------------------------------------------
    def stream_append(self, name: str, item: Any) -> int:
        check_name(name, "stream name")
        frame = _journal.frame({"v": item}, "stream item")
        with self._lock:
            items = self._streams.setdefault(name, [])
            items.append(frame)
            self._stream_written[name] = time.time()
            index = len(items) - 1
        self._signals.fire(f"stream:{name}")
        return index

    def stream_read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        check_name(name, "stream name")
        with self._lock:
            frames = self._streams.get(name, [])
            if start < 0:
                start = max(len(frames) + start, 0)
            chosen = frames[start:end]
        parsed = _journal.parse(b"".join(chosen), 0, f"memory:stream:{name}")
        return [rec["v"] for _, rec in parsed.records]

    def stream_digest(self, name: str, count: int, after: tuple[int, Any] | None = None) -> Any:
        check_name(name, "stream name")
        with self._lock:
            frames = self._streams.get(name, [])
            if count > len(frames):
                return None
            first, crc = 0, 0
            if (
                after is not None
                and isinstance(after[1], tuple)
                and after[1][0] == after[0]
                and 0 <= after[0] <= count
            ):
                first, crc = after[0], after[1][1]
            return count, zlib.crc32(b"".join(frames[first:count]), crc)

    def stream_length(self, name: str) -> int:
        check_name(name, "stream name")
        with self._lock:
            return len(self._streams.get(name, []))

    def stream_versions(self, names: Sequence[str]) -> list[Hashable]:
        # Items are never rewritten here: the length is the token (after a removal a stream
        # made again has another start time).
        with self._lock:
            return [
                (len(self._streams[n]), self._stream_written.get(n)) if n in self._streams else None
                for n in names
            ]

    async def stream_tail(self, name: str, start: int = 0) -> AsyncIterator[tuple[int, Any]]:
        check_name(name, "stream name")
        if start < 0:
            start = max(self.stream_length(name) + start, 0)
        key = f"stream:{name}"
        while True:
            event = self._signals.event(key)
            try:
                items = self.stream_read(name, start)
                if not items:
                    await event.wait()
            finally:
                self._signals.drop(key, event)
            for item in items:
                yield start, item
                start += 1
