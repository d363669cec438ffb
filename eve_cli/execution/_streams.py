"""Append-only streams with idempotent appends.

A re-run of an interrupted workflow re-executes the code that appends events and messages.
Every item carries a deterministic key (``_k``) that starts with the session generation; before
the first append, the keys of the current generation (always the stream's tail) are loaded, and
an append whose key is present is skipped. Replaying a stream therefore yields each item once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from eve_cli._session import history_stream
from eve_cli.execution._event_form import TYPE_CODES, delta_start, exact_ints, pack, unpack
from eve_cli.execution._replies import resolve
from world import World

KEY = "_k"
REF = "_h"  # an event's reference to the history item holding its text
_CHUNK = 256
_FIRST_CHUNK = 4


class KeyCodec(Protocol):
    """How a stream stores its keys compactly (see :class:`KeyedStream`)."""

    def pack(self, item: dict[str, Any], key: str, gen: int) -> Any:
        """What to store as ``_k`` for ``item`` under ``key`` (the key itself, or less). A
        list is checked by the stream to read back as ``key``; any other value must."""
        ...

    def unpack(self, item: dict[str, Any], stored: Any) -> str | None:
        """The key a stored ``_k`` that is not a string stands for (None: none)."""
        ...


class KeyedStream:
    """Idempotent appends to one stream for one session generation.

    With a ``codec``, an item whose key its own fields imply stores less than the key as
    ``_k`` (:class:`KeyCodec`), and the key is derived again wherever keys are read; an item
    is stored so only when what it stores derives back to exactly its key.
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

    def append(self, key: str, item: dict[str, Any]) -> int | None:
        """Append ``item`` under ``key`` unless it is already there; its index when written
        now, None when it was there. ``item`` becomes the stream's: the caller does not use
        it again."""
        keys = self._loaded()
        full = self.prefix + key
        if full in keys:
            return None
        return self._store(keys, full, item)

    def index_of(self, key: str) -> int | None:
        """Where the item stored under ``key`` is; None when there is none."""
        return self._loaded().get(self.prefix + key)

    def put(self, key: str, item: dict[str, Any]) -> int:
        """The index of the item stored under ``key``: ``item`` appended unless one is there
        (a re-run of interrupted work finds what its first run stored)."""
        keys = self._loaded()
        full = self.prefix + key
        index = keys.get(full)
        if index is None:
            item = item.copy()
            index = self._store(keys, full, item)
        return index

    def _store(self, keys: dict[str, int], full: str, item: dict[str, Any]) -> int:
        stored: Any = full
        if self.codec is not None:
            stored = self.codec.pack(item, full, self.gen)
            # Only what reads back as the very key (a bare generation was checked by pack).
            if isinstance(stored, list) and self.codec.unpack(item, stored) != full:
                stored = full
        item[KEY] = stored
        index = keys[full] = self.world.stream_append(self.name, item)
        if "@" in full:
            self._index(full)
        self.length = index + 1 if self.length == index else -1
        return index


_WAITING = TYPE_CODES["session.waiting"]
_TURN_KEYS = {TYPE_CODES[f"turn.{end}"]: "end" for end in ("completed", "failed", "cancelled")}
_TURN_KEYS[TYPE_CODES["turn.started"]] = "start"
_STEP_KEYS = {TYPE_CODES["step.started"]: "start", TYPE_CODES["step.completed"]: "done",
              TYPE_CODES["step.failed"]: "fail", TYPE_CODES["message.completed"]: "0"}  # fmt: skip
_RECEIVED = TYPE_CODES["message.received"]


_APPENDED = TYPE_CODES["message.appended"]


class EventKeys:
    """The compact keys of a session's events (a :class:`KeyCodec`).

    The events whose key the session's code always builds from their fields store only the
    generation (an int): the driver's ``session.waiting``, a turn's start and end, its first
    message, a step's start and end, and the answer of the step's first model call. A delta
    of that call stores ``[generation, offset]`` (its length is its text's)."""

    def pack(self, item: dict[str, Any], key: str, gen: int) -> Any:
        if self.unpack(item, gen) == key:
            return gen
        start = delta_start(key)
        return [gen, start] if item.get("y") == _APPENDED and start is not None else key

    def unpack(self, item: dict[str, Any], stored: Any) -> str | None:
        code, turn, step = item.get("y"), item.get("u"), item.get("s")
        if isinstance(stored, list) and len(stored) == 2 and code == _APPENDED:
            gen, start = stored
            delta = item.get("d")
            if exact_ints(gen, start, turn, step) and isinstance(delta, str):
                return f"{gen}:t{turn}:{step}:0:d@{start}+{len(delta)}"
            return None
        if not exact_ints(stored):
            return None
        gen = stored
        if code == _WAITING and "u" not in item:
            return f"{gen}:g{gen}:wait"
        if not exact_ints(turn):
            return None
        if code in _TURN_KEYS and "s" not in item:
            return f"{gen}:t{turn}:{_TURN_KEYS[code]}"
        if code == _RECEIVED and item.get("p") == "started" and "s" not in item:
            return f"{gen}:t{turn}:in:m"
        if code in _STEP_KEYS and exact_ints(step):
            return f"{gen}:t{turn}:{step}:{_STEP_KEYS[code]}"
        return None


class HistoryKeys:
    """The compact keys of a session's history (a :class:`KeyCodec`): a turn's first user
    message stores ``[generation, turn]``, a step's first model answer ``[generation, turn,
    step]``; any other item its key."""

    def pack(self, item: dict[str, Any], key: str, gen: int) -> Any:
        parts = key.split(":")
        if len(parts) > 2 and parts[1][:1] == "t" and parts[1][1:].isdigit():
            turn = int(parts[1][1:])
            packed = [gen, turn] if parts[2:] == ["in", "u"] else [gen, turn, _int(parts[2])]
            return packed if None not in packed else key
        return key

    def unpack(self, item: dict[str, Any], stored: Any) -> str | None:
        if not isinstance(stored, list) or not exact_ints(*stored):
            return None
        role = item.get("role")
        if len(stored) == 2 and role == "user":
            return f"{stored[0]}:t{stored[1]}:in:u"
        if len(stored) == 3 and role == "assistant":
            return f"{stored[0]}:t{stored[1]}:{stored[2]}:0:a"
        return None


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def strip_key(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != KEY}


def stored_event(
    type: str, at: float, data: dict[str, Any], since: float | None = None
) -> dict[str, Any]:
    """An event as stored: no session id (the stream names it), in the compact form of
    :mod:`eve_cli.execution._event_form`; ``at`` as epoch seconds (a float), or, given the
    session's creation time (``since``: its run's meta ``created``), whole milliseconds
    since then (an int: 3-5 bytes, not 9)."""
    return pack({"type": type, "at": stored_time(at, since), **data})


def stored_time(at: float, since: float | None) -> float | int:
    """An event's ``at`` as stored (see :func:`stored_event`)."""
    return round(at, 3) if since is None else round(at * 1000) - round(since * 1000)


def read_event(
    session_id: str,
    index: int,
    item: dict[str, Any],
    texts: dict[int, str] | None = None,
    meta: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A stored event as readers see it (SPEC §8): with index, session id and ISO time,
    ``text`` where the stored event refers to a history item (``_h``; ``texts`` by index),
    and a ``session.waiting`` stored without its ``continuationToken`` (the session's own)
    with it again, after ``at``, where it always was. ``meta()``: the session run's meta
    (its ``token``, and ``created``, the base of an ``at`` stored as an int)."""
    event: dict[str, Any] = {}
    stored = unpack(item)
    waiting = stored.get("type") == "session.waiting" and "continuationToken" not in stored
    for k, v in stored.items():
        if k == REF:
            event["text"] = (texts or {}).get(v, "")
        elif k != KEY:
            event[k] = v
        if k == "at" and waiting:
            event["continuationToken"] = (meta() if meta is not None else {}).get("token")
    at = event.get("at")
    if isinstance(at, int) and not isinstance(at, bool):
        since = (meta() if meta is not None else {}).get("created") or 0.0
        event["at"] = iso_from_ms(round(float(since) * 1000) + at)
    elif isinstance(at, float):
        event["at"] = iso_ms(at)
    event["index"] = index
    event.setdefault("sessionId", session_id)
    return event


_SECONDS: dict[int, str] = {}  # epoch second -> its ISO form up to the seconds (UTC)


def iso_ms(at: float) -> str:
    """``datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")``, without
    building a datetime per event (a view reads every event of a turn)."""
    if not 0 <= at < 253402300800:  # outside years 1970-9999: the slow way says what is wrong
        return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    second = int(at)
    micros = round((at - second) * 1e6)  # as fromtimestamp rounds: half to even
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    return f"{_second_iso(second)}.{micros // 1000:03d}+00:00"


def iso_from_ms(ms: int) -> str:
    """The ISO time (UTC, milliseconds) of ``ms`` milliseconds since the epoch."""
    if not 0 <= ms < 253402300800000:
        moment = datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
        return moment.isoformat(timespec="milliseconds")
    return f"{_second_iso(ms // 1000)}.{ms % 1000:03d}+00:00"


def _second_iso(second: int) -> str:
    prefix = _SECONDS.get(second)
    if prefix is None:
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        prefix = _SECONDS[second] = datetime.fromtimestamp(second, UTC).isoformat()[:19]
    return prefix


class EventReader:
    """Reads one session's stored events as SPEC §8 events (see :func:`read_event`)."""

    def __init__(
        self, world: World, session_id: str, meta: Callable[[], dict[str, Any]] | None = None
    ) -> None:
        self.world = world
        self.session_id = session_id
        self.history = history_stream(session_id)
        self._meta = meta  # the session run's meta, asked for once when needed
        self._known: list[dict[str, Any]] = []

    def meta(self) -> dict[str, Any]:
        if not self._known:
            self._known.append(self._meta() if self._meta is not None else {})
        return self._known[0]

    def read(self, first: int, items: list[Any], *, texts: bool = True) -> list[dict[str, Any]]:
        """The events stored at ``first``, ``first + 1``, ... (as read from the stream);
        ``texts=False``: an event that refers to a history item gets ``text`` "" (no read).

        The events end before the first one whose history item is not stored: the item is
        appended before the event, so it is being written, or a power cut kept the event and
        not the item (both written after the last journal record); a resume stores the item
        again, at the same index, with the same text. Never shown as ""."""
        refs = {i[REF] for i in items if isinstance(i, dict) and REF in i} if texts else set()
        # A reply's text may be in its delta events, which come just before the reference.
        found = self.texts(refs, dict(enumerate(items, first)) if refs else None)
        if len(found) < len(refs):
            for i, item in enumerate(items):
                if isinstance(item, dict) and REF in item and item[REF] not in found:
                    items = items[:i]
                    break
        return [
            read_event(self.session_id, first + i, item, found, self.meta)
            for i, item in enumerate(items)
        ]

    def texts(self, refs: set[int], events: dict[int, Any] | None = None) -> dict[int, str]:
        """The text (``content``) of the history items ``refs``: one read when they are close
        together (a session's events refer to about every history item), else one each.
        ``events``: stored events at hand, by index (a reply's text may be in them)."""
        if not refs:
            return {}
        low, high = min(refs), max(refs)
        spans = [(low, high + 1)] if high - low < 4 * len(refs) + 64 else [(r, r + 1) for r in refs]
        found: dict[int, str] = {}
        for start, end in spans:
            items = self.world.stream_read(self.history, start, end)
            items = [i if start + n in refs else None for n, i in enumerate(items)]
            items = resolve(self.world, self.session_id, start, items, events=events)
            for offset, item in enumerate(items):
                if isinstance(item, dict):
                    found[start + offset] = str(item.get("content") or "")
        return found
