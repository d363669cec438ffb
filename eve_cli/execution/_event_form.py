"""The compact stored form of events (event form 2) and its expansion.

An event is stored once per session stream and read many times, so its stored form is short:
the type as a number (:data:`TYPES`, append-only), the common fields under one-letter names
(:data:`FIELDS`), ``turnId`` ``t<n>`` as the number ``n``, a ``usage`` of exactly input and
output tokens as a pair. Field order is kept, so expansion gives back exactly the event that
was packed. Form 1 (``type`` and full names) is what earlier versions stored; it reads as is.
An event whose data already uses one of the short names is stored in form 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from eve_cli._events import Event

# Append-only: a stored number means the type at that position forever.
TYPES = (
    "session.started", "session.waiting", "session.completed", "session.failed",
    "session.cancelled", "turn.started", "turn.waiting", "turn.completed", "turn.failed",
    "turn.cancelled", "message.received", "message.appended", "message.completed",
    "step.started", "step.completed", "step.failed", "actions.requested", "action.result",
    "input.requested", "input.resolved", "compaction.requested", "compaction.completed",
    "context.cleared", "task.started", "task.settled", "reasoning.appended",
    "reasoning.completed", "result", "mcp.ready", "message.queued", "session.moved",
)  # fmt: skip
TYPE_CODES = {name: code for code, name in enumerate(TYPES)}  # a type's stored number
FIELDS = {
    "type": "y", "at": "a", "turnId": "u", "stepIndex": "s", "delta": "d", "usage": "g",
    "continuationToken": "c", "turns": "n", "steps": "m", "disposition": "p", "role": "r",
}  # fmt: skip
_NAMES = {code: name for name, code in FIELDS.items()}
# Data naming one of these is packed by `pack` whole (see `pack_parts`).
_HEAD = frozenset({"type", "at", "turnId", "stepIndex", *_NAMES})
_TURN_ID = re.compile(r"t([0-9]{1,9})")
_USAGE = ("inputTokens", "outputTokens")


def pack(event: Event) -> dict[str, Any]:
    """The stored form of ``event`` (``type``, ``at`` as epoch seconds, then its fields)."""
    if not _NAMES.keys().isdisjoint(event):
        return dict(event)  # form 1: a short name would be ambiguous
    return _packed({}, event)


def pack_parts(
    type: str, at: float | int, turn_id: str | None, step: int | None, data: Mapping[str, Any]
) -> dict[str, Any]:
    """``pack`` of the event ``type`` at ``at``, of turn ``turn_id`` and step ``step`` (None:
    left out), with ``data`` after: the same dict, without building the event first."""
    if not _HEAD.isdisjoint(data):
        head = {"type": type, "at": at, "turnId": turn_id, "stepIndex": step}
        return pack(cast(Event, {k: v for k, v in head.items() if v is not None} | dict(data)))
    # The head as `_packed` stores it (`_CODED`), its fields' types known: no loop, no checks.
    stored: dict[str, object] = {"y": TYPE_CODES.get(type, type), "a": at}
    if turn_id is not None:  # (`_turn_number`'s lookup inline: every event of a turn asks)
        stored["u"] = _TURN_NUMBERS.get(turn_id) or _turn_number(turn_id)
    if step is not None:
        stored["s"] = step
    return _packed(stored, data)


def _packed(stored: dict[str, object], fields: Mapping[str, Any]) -> dict[str, object]:
    """``stored`` with ``fields`` added in their stored form: the one place that says how
    (short names, the type's number, a turn's number, a usage pair)."""
    for key, value in fields.items():
        short = FIELDS.get(key)
        if short is None:
            stored[key] = value
        elif short in _CODED:
            stored[short] = _CODED[short](value)
        else:
            stored[short] = value
    return stored


def _type_code(type: Any) -> Any:
    return TYPE_CODES.get(type, type) if isinstance(type, str) else type


def _turn_code(turn_id: Any) -> Any:
    return _turn_number(turn_id) if isinstance(turn_id, str) else turn_id


def _usage_pair(usage: Any) -> Any:
    """A usage of exactly input and output tokens (in that order) as their pair."""
    return (
        [usage[k] for k in _USAGE] if isinstance(usage, dict) and tuple(usage) == _USAGE else usage
    )


_CODED = {"y": _type_code, "u": _turn_code, "g": _usage_pair}  # fields stored coded


_TURN_NUMBERS: dict[str, int | str] = {}  # every event of a turn has its id: match it once


def _turn_number(turn_id: str) -> int | str:
    number = _TURN_NUMBERS.get(turn_id)
    if number is None:
        m = _TURN_ID.fullmatch(turn_id)
        number = int(m.group(1)) if m else turn_id
        if len(_TURN_NUMBERS) > 4096:
            _TURN_NUMBERS.clear()
        _TURN_NUMBERS[turn_id] = number
    return number


def unpack(stored: dict[str, Any]) -> Event:
    """The event ``stored`` holds, with its full field names (form 1 returned as is)."""
    # Read as stored: an event is a JSON object whose fields `Event` declares (and open: one
    # written by a later eve keeps the fields it does not know), checked by no one at run time.
    if "y" not in stored:
        return cast(Event, stored)
    event = {}
    for code, value in stored.items():
        key = _NAMES.get(code, code)
        if key == "type" and isinstance(value, int):
            value = TYPES[value] if 0 <= value < len(TYPES) else str(value)
        elif key == "turnId" and isinstance(value, int):
            value = f"t{value}"
        elif key == "usage" and isinstance(value, list) and len(value) == len(_USAGE):
            value = dict(zip(_USAGE, value, strict=True))
        event[key] = value
    return cast(Event, event)


def exact_ints(*values: Any) -> bool:
    """Whether every value is an int and not a bool (stored keys and spans hold exact ints)."""
    for v in values:  # a loop, not all(...): this runs for every event a stream stores
        if type(v) is not int and not (isinstance(v, int) and not isinstance(v, bool)):
            return False
    return True
