"""Append-only streams with idempotent appends.

A re-run of an interrupted workflow re-executes the code that appends events and messages.
Every item carries a deterministic key (``_k``) that starts with the session generation; before
the first append, the keys of the current generation (always the stream's tail) are loaded, and
an append whose key is present is skipped. Replaying a stream therefore yields each item once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from world import World

KEY = "_k"
_CHUNK = 256
_FIRST_CHUNK = 4


class KeyedStream:
    """Idempotent appends to one stream for one session generation."""

    def __init__(self, world: World, name: str, gen: int) -> None:
        self.world = world
        self.name = name
        self.prefix = f"{gen}:"
        self._keys: set[str] | None = None
        self._by_head: dict[str, list[str]] = {}  # "<...>@" -> the keys that start with it

    def _load(self) -> set[str]:
        keys: set[str] = set()
        end, chunk = self.world.stream_length(self.name), _FIRST_CHUNK
        while end > 0:
            # Small reads first: a new generation usually has no item yet (a turn starts one).
            start = max(0, end - chunk)
            for item in reversed(self.world.stream_read(self.name, start, end)):
                key = item.get(KEY, "") if isinstance(item, dict) else ""
                if not key.startswith(self.prefix):
                    return keys
                keys.add(key)
            end, chunk = start, min(chunk * 4, _CHUNK)
        return keys

    def _loaded(self) -> set[str]:
        if self._keys is None:
            self._keys = self._load()
            for key in self._keys:
                self._index(key)
        return self._keys

    def _index(self, key: str) -> None:
        head, at, _ = key.partition("@")
        if at:
            self._by_head.setdefault(head + at, []).append(key)

    def keys_starting(self, prefix: str) -> list[str]:
        """Keys of this generation already stored that start with ``prefix`` (unprefixed)."""
        keys = self._loaded()
        full = self.prefix + prefix
        if full.endswith("@") and full.count("@") == 1:  # asked at every model call: no scan
            return [k[len(self.prefix) :] for k in self._by_head.get(full, [])]
        return [k[len(self.prefix) :] for k in keys if k.startswith(full)]

    def append(self, key: str, item: dict[str, Any]) -> bool:
        """Append ``item`` under ``key`` unless it is already there; True when written."""
        keys = self._loaded()
        full = self.prefix + key
        if full in keys:
            return False
        item = item.copy()
        item[KEY] = full
        self.world.stream_append(self.name, item)
        keys.add(full)
        self._index(full)
        return True


def strip_key(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != KEY}


def now_iso() -> str:
    """Wall-clock time for an event's ``at`` (UTC, milliseconds)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def stored_event(type: str, at: float, data: dict[str, Any]) -> dict[str, Any]:
    """An event as stored: no session id (the stream names it), ``at`` as epoch seconds."""
    return {"type": type, "at": round(at, 3), **data}


def read_event(session_id: str, index: int, item: dict[str, Any]) -> dict[str, Any]:
    """A stored event as readers see it (SPEC §8): with index, session id and ISO time."""
    event = {k: v for k, v in item.items() if k != KEY}
    at = event.get("at")
    if isinstance(at, int | float):
        event["at"] = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    event["index"] = index
    event.setdefault("sessionId", session_id)
    return event
