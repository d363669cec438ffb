"""A world written outside `world/`, from its public names only: proof that the interface is
whole (a backend needs no private import). Every world-independent test runs on it too
(tests/worlds.py: `outside`). Plain dicts under one lock; waits poll every few ms (a test
double: a real world wakes its waiters, as the memory world does)."""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from world import (
    FamilyHead,
    FamilyLog,
    FamilyUsage,
    HookConflictError,
    InboxItem,
    Lease,
    OwnershipError,
    RunExistsError,
    RunNotFoundError,
    World,
    WorldError,
    check_name,
    check_run_id,
    decode,
    encode,
    root_of,
    stream_family,
)

_POLL = 0.002  # seconds between looks while waiting


@dataclass
class _Family:
    records: list[bytes]  # record bodies; a record's position is its index + 1
    head: bytes | None = None
    inbox: list[bytes] = field(default_factory=list)  # encoded (token, payload, at)
    owner: object | None = None
    written: float = field(default_factory=time.time)


class _Lease(Lease):
    def __init__(self, world: OutsideWorld, root: str) -> None:
        self._world, self._root = world, root

    def release(self) -> None:
        with self._world._lock:
            family = self._world._families.get(self._root)
            if family is not None and family.owner is self:
                family.owner = None


class OutsideWorld(World):
    """The whole interface on dicts, with nothing but `world`'s public surface."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._hooks: dict[str, str] = {}
        self._streams: dict[str, list[bytes]] = {}
        self._made: dict[str, int] = {}  # a stream's creation number (its version's first part)
        self._lock = threading.RLock()

    def _family(self, root: str) -> _Family:
        family = self._families.get(check_run_id(root))
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
        with self._lock:  # all at once: no one sees a part of a fork
            if check_run_id(root) in self._families:
                raise RunExistsError(f"run {root!r} already exists")
            for token, run_id in (hooks or {}).items():
                if self._hooks.get(check_name(token, "hook token"), run_id) != run_id:
                    raise HookConflictError(f"hook token {token!r} is owned by another run")
            for source, n in (streams or {}).values():
                if len(self._streams.get(source, [])) < n:
                    raise WorldError(f"stream {source!r} holds fewer than {n} items")
            for name, (source, n) in (streams or {}).items():
                self._made[check_name(name, "stream name")] = (
                    len(self._made) + 1 + max(self._made.values(), default=0)
                )
                self._streams[name] = list(self._streams[source][:n])
            self._hooks.update(hooks or {})
            self._families[root] = _Family(records=list(bodies))
        return list(range(1, len(bodies) + 1))

    def families(self) -> list[str]:
        with self._lock:
            return sorted(self._families)

    def heads(
        self, *, roots: Sequence[str] | None = None, inbox: bool = True, runnable: bool = False
    ) -> list[FamilyHead]:
        with self._lock:
            found = sorted(self._families if roots is None else set(roots) & set(self._families))
            stored = [(r, self._families[r].head, len(self._families[r].inbox)) for r in found]
        out = []
        for root, data, end in stored:
            head = decode(data) if data is not None else None
            out.append(FamilyHead(root, head if isinstance(head, dict) else None, end))
        return out

    def load(self, root: str, start: int = 0) -> FamilyLog:
        with self._lock:
            bodies = list(self._family(root).records)
        first = start if 1 <= start <= len(bodies) else 1
        records = [(pos, decode(bodies[pos - 1])) for pos in range(first, len(bodies) + 1)]
        return FamilyLog(records=records, start=first if first > 1 else 0)

    def commit(
        self, root: str, bodies: Sequence[bytes] = (), *, head: dict[str, Any] | None = None
    ) -> list[int]:
        data = None if head is None else encode(head, "head")
        with self._lock:  # every call is whole before it returns
            family = self._family(root)
            first = len(family.records) + 1
            family.records.extend(bodies)
            if data is not None:
                family.head = data
            family.written = time.time()
        return list(range(first, first + len(bodies)))

    def family_usage(self, root: str, *, streams: Sequence[str] | None = None) -> FamilyUsage:
        names = self.stream_names(family=root) if streams is None else list(streams)
        with self._lock:
            family = self._families.get(check_run_id(root))
            size = sum(len(b) for n in names for b in self._streams.get(n, []))
            if family is None:
                return FamilyUsage(size, 0.0)
            size += sum(map(len, family.records)) + sum(map(len, family.inbox))
            return FamilyUsage(size + len(family.head or b""), family.written)

    def stream_names(self, *, family: str | None = None) -> list[str]:
        with self._lock:
            return sorted(n for n in self._streams if family in (None, stream_family(n)))

    def remnants(self) -> list[str]:
        with self._lock:
            roots = {stream_family(n) for n in self._streams}
            roots |= {root_of(owner) for owner in self._hooks.values()}
            return sorted(r for r in roots if r is not None and r not in self._families)

    def remove_family(self, root: str, *, inbox_mark: int | None = None) -> bool:
        with self._lock:
            family = self._families.get(check_run_id(root))
            if family is not None and inbox_mark is not None and len(family.inbox) != inbox_mark:
                return False
            for token in [t for t, owner in self._hooks.items() if root_of(owner) == root]:
                del self._hooks[token]
            for name in [n for n in self._streams if stream_family(n) == root]:
                del self._streams[name]
            self._families.pop(root, None)
        return True

    # -- inbox -------------------------------------------------------------------------------
    def deliver(self, root: str, token: str, payload: Any) -> int:
        data = encode([token, payload, time.time()], "payload")
        with self._lock:
            family = self._family(root)
            family.inbox.append(data)
            family.written = time.time()
            return len(family.inbox) - 1

    def read_inbox(self, root: str, start: int = 0) -> tuple[list[InboxItem], int]:
        start = max(start, 0)
        with self._lock:
            stored = list(self._family(root).inbox)
        items = []
        for i in range(start, len(stored)):
            token, payload, at = decode(stored[i])
            items.append(InboxItem(i, token, payload, at, zlib.crc32(stored[i])))
        return items, max(len(stored), start)

    def inbox_end(self, root: str) -> int:
        with self._lock:
            return len(self._family(root).inbox)

    # -- hooks -------------------------------------------------------------------------------
    def set_hook(self, token: str, run_id: str | None, *, holder: str | None = None) -> str | None:
        check_name(token, "hook token")
        with self._lock:
            if self._hooks.get(token) == holder:
                if run_id is None:
                    self._hooks.pop(token, None)
                else:
                    self._hooks[token] = run_id
            return None if run_id is None else self._hooks.get(token)

    def hook_owner(self, token: str) -> str | None:
        check_name(token, "hook token")
        return self._hooks.get(token)

    # -- ownership and wake-ups --------------------------------------------------------------
    def acquire(self, root: str, wait: float | None = None) -> Lease:
        deadline = time.monotonic() + (wait or 0.0)
        lease = _Lease(self, root)
        while True:
            with self._lock:
                family = self._family(root)
                if family.owner is None:
                    family.owner = lease
                    return lease
            if time.monotonic() >= deadline:
                raise OwnershipError(f"run family {root!r} is owned by another engine")
            time.sleep(_POLL)

    async def wait_inbox(self, root: str, mark: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.inbox_end(root) == mark:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL)
        return True

    # -- streams -----------------------------------------------------------------------------
    def stream_append(self, name: str, item: Any) -> int:
        data = encode(item, "stream item")
        with self._lock:
            if check_name(name, "stream name") not in self._streams:
                self._made[name] = len(self._made) + 1 + max(self._made.values(), default=0)
            items = self._streams.setdefault(name, [])
            items.append(data)
            return len(items) - 1

    def stream_read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        with self._lock:
            items = list(self._streams.get(check_name(name, "stream name"), []))
        if start < 0:
            start = max(len(items) + start, 0)
        return [decode(data) for data in items[start:end]]

    def stream_length(self, name: str) -> int:
        with self._lock:
            return len(self._streams.get(check_name(name, "stream name"), []))

    def stream_versions(self, names: Sequence[str]) -> list[Hashable]:
        with self._lock:  # a stream removed and made again has another creation number
            return [
                (self._made[n], len(self._streams[n])) if n in self._streams else None
                for n in names
            ]

    def stream_digest(self, name: str, count: int, after: tuple[int, Any] | None = None) -> Any:
        with self._lock:
            items = self._streams.get(check_name(name, "stream name"), [])
            if count > len(items):
                return None
            first, crc = 0, 0
            checked = after is not None and isinstance(after[1], tuple)
            if checked and after is not None and after[1][0] == after[0] <= count:
                first, crc = after[0], after[1][1]
            return count, zlib.crc32(b"".join(items[first:count]), crc)

    async def stream_tail(self, name: str, start: int = 0) -> AsyncIterator[tuple[int, Any]]:
        if start < 0:
            start = max(self.stream_length(name) + start, 0)
        while True:
            items = self.stream_read(name, start)
            if not items:
                await asyncio.sleep(_POLL)
            for item in items:
                yield start, item
                start += 1
