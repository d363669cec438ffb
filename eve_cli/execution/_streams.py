"""Append-only streams with idempotent appends.

A re-run of an interrupted workflow re-executes the code that appends events and messages.
Every item carries a deterministic key (``_k``) that starts with the session generation; before
the first append, the keys of the current generation (always the stream's tail) are loaded, and
an append whose key is present is skipped. Replaying a stream therefore yields each item once.
Keys are made by :mod:`eve_cli._keys`; how events and history store them compactly is
:mod:`._keys`; events as stored and read, :mod:`._stored_events`.
"""

from __future__ import annotations

from typing import Any, Protocol

from eve_cli._keys import Key
from world import LostItem, World

KEY = "_k"
_CHUNK = 256
_FIRST_CHUNK = 4


def prefixed(gen: int, key: Key) -> str:
    """A key as a stream of generation ``gen`` stores it."""
    return f"{gen}:{key.text}"


class KeyCodec(Protocol):
    """How a stream reads the compact keys it stores (see :class:`KeyedStream`)."""

    def unpack(self, item: dict[str, Any], stored: Any) -> str | None:
        """The key (prefixed) a stored ``_k`` that is not a string stands for, derived from
        ``item``'s own fields (None: none)."""
        ...


class KeyedStream:
    """Idempotent appends to one stream for one session generation.

    With a ``codec``, an item whose key its own fields imply stores less than the key as
    ``_k`` (the numbers :meth:`Key.stored` gives), and the key is derived again wherever keys
    are read (:class:`KeyCodec`); an item is stored so only when what it stores derives back
    to exactly its key.
    """

    def __init__(self, world: World, name: str, gen: int, codec: KeyCodec | None = None) -> None:
        self.world = world
        self.name = name
        self.gen = gen
        self.prefix = f"{gen}:"
        self.codec = codec
        self._keys: dict[str, int] | None = None  # key -> index, this generation's items
        self._by_head: dict[str, list[str]] = {}  # "<...>@" -> the keys that start with it
        self.length = -1  # the stream's length when the keys were last known complete

    def key_of(self, item: Any) -> str:
        """The key of a stored item ("" when it has none)."""
        key = item.get(KEY, "") if isinstance(item, dict) else ""
        if not isinstance(key, str):
            key = (self.codec.unpack(item, key) if self.codec is not None else None) or ""
        return key

    def _load(self) -> dict[str, int]:
        keys: dict[str, int] = {}
        end, chunk = self.length, _FIRST_CHUNK
        while end > 0:
            # Small reads first: a new generation usually has no item yet (a turn starts one).
            start = max(0, end - chunk)
            items = self.world.stream_read(self.name, start, end)
            for offset in range(len(items) - 1, -1, -1):
                if isinstance(items[offset], LostItem):
                    continue  # its key is gone with it: a replay stores it again, later
                key = self.key_of(items[offset])
                if not key.startswith(self.prefix):
                    return keys
                keys[key] = start + offset
            end, chunk = start, min(chunk * 4, _CHUNK)
        return keys

    def _loaded(self) -> dict[str, int]:
        if self._keys is None:
            self.length = self.world.stream_length(self.name)
            self._keys = self._load()
            for key in self._keys:
                self._index(key)
        return self._keys

    @property
    def loaded(self) -> bool:
        return self._keys is not None

    def load(self) -> None:
        """Read this generation's keys now, if they are not known yet."""
        self._loaded()

    def current(self) -> bool:
        """Whether the keys known here are still all of this generation's (nothing was
        appended since by anyone else): then another workflow of the same generation in this
        process may use this object instead of reading the keys again."""
        return self._keys is not None and self.world.stream_length(self.name) == self.length

    def start_empty(self, length: int) -> None:
        """Known to hold nothing of this generation yet in a stream of ``length`` items (the
        previous generation's object was current at that length)."""
        self._keys, self._by_head, self.length = {}, {}, length

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

    def append(self, key: Key, item: dict[str, Any]) -> int | None:
        """Append ``item`` under ``key`` unless it is already there; its index when written
        now, None when it was there. ``item`` becomes the stream's: the caller does not use
        it again."""
        keys = self._loaded()
        full = self.prefix + key.text
        if full in keys:
            return None
        return self._store(keys, key, full, item)

    def index_of(self, key: Key) -> int | None:
        """Where the item stored under ``key`` is; None when there is none."""
        return self._loaded().get(self.prefix + key.text)

    def put(self, key: Key, item: dict[str, Any]) -> int:
        """The index of the item stored under ``key``: ``item`` appended unless one is there
        (a re-run of interrupted work finds what its first run stored)."""
        keys = self._loaded()
        full = self.prefix + key.text
        index = keys.get(full)
        if index is None:
            item = item.copy()
            index = self._store(keys, key, full, item)
        return index

    def _store(self, keys: dict[str, int], key: Key, full: str, item: dict[str, Any]) -> int:
        stored: Any = full
        codec = self.codec
        if codec is not None and key.compact is not None:
            compact = key.stored(self.gen)
            if codec.unpack(item, compact) == full:
                stored = compact  # only what reads back as the very key
        item[KEY] = stored
        index = keys[full] = self.world.stream_append(self.name, item)
        if "@" in full:
            self._index(full)
        self.length = index + 1 if self.length == index else -1
        return index


def strip_key(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != KEY}
