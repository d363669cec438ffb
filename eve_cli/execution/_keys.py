"""The compact keys of a session's events and history: each a :class:`~._streams.KeyCodec`."""

from __future__ import annotations

from typing import Any

from eve_cli.execution._event_form import TYPE_CODES, delta_start, exact_ints

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
