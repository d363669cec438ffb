"""How a session's events and history store their keys compactly: each a
:class:`~._streams.KeyCodec`, deriving a key made by :mod:`eve_cli._keys` back from the
fields of the item that stores less than it (:meth:`eve_cli._keys.Key.stored`)."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from eve_cli._keys import Key, Step, Turn, generation, turn
from eve_cli.execution._event_form import TYPE_CODES, exact_ints
from eve_cli.execution._streams import prefixed

_WAITING = TYPE_CODES["session.waiting"]
_TURN_KEYS: dict[int, Callable[[Turn], Key]] = {
    TYPE_CODES[f"turn.{end}"]: attrgetter("end") for end in ("completed", "failed", "cancelled")
}
_TURN_KEYS[TYPE_CODES["turn.started"]] = attrgetter("start")
_STEP_KEYS: dict[int, Callable[[Step], Key]] = {
    TYPE_CODES["step.started"]: attrgetter("start"),
    TYPE_CODES["step.completed"]: attrgetter("done"),
    TYPE_CODES["step.failed"]: attrgetter("failed"),
    TYPE_CODES["message.completed"]: lambda step: step.call(0).completed,
}
_RECEIVED = TYPE_CODES["message.received"]
_APPENDED = TYPE_CODES["message.appended"]


class EventKeys:
    """The compact keys of a session's events (a :class:`KeyCodec`).

    The events whose key the session's code always builds from their fields store only the
    generation (an int): the driver's ``session.waiting``, a turn's start and end, its first
    message, a step's start and end, and the answer of the step's first model call. A delta
    of that call stores ``[generation, offset]`` (its length is its text's)."""

    def unpack(self, item: dict[str, Any], stored: Any) -> str | None:
        code = item.get("y")
        t: Any = item.get("u")  # the turn and step numbers: ints when exact_ints says so
        s: Any = item.get("s")
        if isinstance(stored, list) and len(stored) == 2 and code == _APPENDED:
            return _delta_key(stored, item.get("d"), t, s)
        # (`exact_ints` only when not plainly an int: this runs for every event a stream stores)
        if type(stored) is not int and not exact_ints(stored):
            return None
        if code == _WAITING and "u" not in item:
            return prefixed(stored, generation(stored).waiting)
        if type(t) is not int and not exact_ints(t):
            return None
        if code in _TURN_KEYS and "s" not in item:
            return prefixed(stored, _TURN_KEYS[code](turn(t)))
        if code == _RECEIVED and item.get("p") == "started" and "s" not in item:
            return prefixed(stored, turn(t).first.received)
        if code in _STEP_KEYS and (type(s) is int or exact_ints(s)):
            return prefixed(stored, _STEP_KEYS[code](turn(t).step(s)))
        return None


def _delta_key(stored: list[Any], delta: Any, t: Any, s: Any) -> str | None:
    """The key of a delta of step ``s``'s first model call stored as ``[generation, start]``."""
    gen, start = stored
    if exact_ints(gen, start, t, s) and isinstance(delta, str):
        return prefixed(gen, turn(t).step(s).call(0).delta(start, len(delta)))
    return None


class HistoryKeys:
    """The compact keys of a session's history (a :class:`KeyCodec`): a turn's first user
    message stores ``[generation, turn]``, a step's first model answer ``[generation, turn,
    step]``; any other item its key."""

    def unpack(self, item: dict[str, Any], stored: Any) -> str | None:
        if not isinstance(stored, list) or not exact_ints(*stored):
            return None
        role = item.get("role")
        if len(stored) == 2 and role == "user":
            return prefixed(stored[0], turn(stored[1]).first.user)
        if len(stored) == 3 and role == "assistant":
            return prefixed(stored[0], turn(stored[1]).step(stored[2]).call(0).reply)
        return None
