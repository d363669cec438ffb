"""What a repair's gaps cost a session, said in the user's terms (issue 22): the turn, what it
was (the start of its user message), the step, and what of it is gone — not byte offsets or
run ids. `eve doctor`, `eve inspect` and `eve chat` say it alike.

A gap (`world.repair` replaced damaged bytes by a `gap` record of their length) is found where
it is: in the journal (a record), in the events or history stream (an item a read cannot
return), or in the inbox (a delivery a turn took reads `lost` in its `recv` record).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from eve_cli._events import Event
from eve_cli._session import events_stream, history_stream, migrate
from eve_cli.execution import REF, unpack
from world import CorruptJournalError, JournalRecord, LostItem, WorldError, stream_family

if TYPE_CHECKING:
    from eve_cli.runtime import Runtime

_CHUNK = 256
_QUOTE = 40  # characters of a turn's message quoted


class LossRecord(TypedDict):
    """A loss as ``eve doctor --json`` shows it."""

    sessionId: str
    turn: int | None
    message: str | None
    step: int | None
    what: str


@dataclass(frozen=True)
class Loss:
    """One thing a repair replaced, placed in its session."""

    session: str
    what: str  # "a journal record", "an event", "the user's message", ...
    turn: int | None = None
    message: str | None = None  # the start of the turn's user message
    step: int | None = None

    def line(self) -> str:
        """``turn 2 ("what time is it?"), step 0: an event (index 17)``."""
        if self.turn is None:
            return self.what
        where = f"turn {self.turn}"
        if self.message:
            where += f" (“{self.message}”)"
        if self.step is not None:
            where += f", step {self.step}"
        return f"{where}: {self.what}"

    def as_dict(self) -> LossRecord:
        return {
            "sessionId": self.session,
            "turn": self.turn,
            "message": self.message,
            "step": self.step,
            "what": self.what,
        }


def losses(rt: Runtime, sid: str) -> list[Loss]:
    """Everything repairs replaced in session ``sid``'s stored data (none: [])."""
    events, lost_events = _readable(rt, events_stream(sid))
    history, lost_history = _readable(rt, history_stream(sid))
    try:
        journal = rt.engine.journal(sid)
    except WorldError:
        journal = []
    place = _Placer(sid, {i: unpack(e) for i, e in events.items() if isinstance(e, dict)}, history)
    turn_at = _turns(sid, journal)
    found: list[Loss] = []
    for pos, rec in journal:
        if rec.get("t") == "gap":
            found.append(place(f"a journal record (offset {pos})", turn_at(pos)))
        elif rec.get("t") == "recv" and "lost" in rec:
            what = f"a delivery it took (id {rec['lost']}: a message or an answer)"
            found.append(place(what, turn_at(pos)))
    for index in lost_events:
        found.append(place(f"an event (index {index})", *_scope(place.events, index)))
    refs = {e[REF]: i for i, e in place.events.items() if isinstance(e.get(REF), int)}
    found += [_lost_item(place, refs, index) for index in lost_history]
    return found


def _lost_item(place: _Placer, refs: Mapping[int, int], index: int) -> Loss:
    """The loss of history item ``index``; ``refs``: the event referring to each item."""
    ref = refs.get(index)
    if ref is not None:
        what = _ITEMS.get(str(place.events[ref].get("type")), "a history item")
    else:  # a tool call or result: no event refers to it; the nearest item before does
        what = "a history item: a tool call or its result"
        ref = refs[max(below)] if (below := [h for h in refs if h < index]) else None
    scope = _scope(place.events, ref, exact=True) if ref is not None else (None, None)
    return place(f"{what} (history item {index})", *scope)


_ITEMS = {"message.received": "the user's message", "message.completed": "the reply"}


@dataclass
class _Placer:
    """Makes a `Loss` of a session, quoting its turn's message."""

    session: str
    events: dict[int, Event]  # the readable stored events, by index
    history: dict[int, Any]  # the readable history items, by index

    def __call__(self, what: str, turn: int | None, step: int | None = None) -> Loss:
        if turn is not None and turn > 1 and not self.started(turn):
            # The generation waiting for the next message: after the turn before it.
            return Loss(self.session, f"{what}, after it ended", turn - 1, self.message(turn - 1))
        return Loss(self.session, what, turn, self.message(turn), step)

    def started(self, turn: int) -> bool:
        return any(
            e.get("type") == "turn.started" and e.get("turnId") == f"t{turn}"
            for e in self.events.values()
        )

    def message(self, turn: int | None) -> str | None:
        """The start of turn ``turn``'s user message, if it can be read."""
        for event in self.events.values():
            if event.get("type") == "message.received" and event.get("turnId") == f"t{turn}":
                item = self.history.get(event.get(REF, -1))
                text = item.get("content") if isinstance(item, dict) else None
                return _quote(text) if isinstance(text, str) else None
        return None


def note(rt: Runtime, sid: str) -> str:
    """``lost in a repair: <loss>; <loss>`` for session ``sid``, or "" when nothing was."""
    try:
        found = losses(rt, sid)
    except WorldError:
        return ""
    if not found:
        return ""
    shown = "; ".join(loss.line() for loss in found[:5])
    more = f"; and {len(found) - 5} more (eve doctor lists them)" if len(found) > 5 else ""
    return f"lost in a repair (the bytes are in quarantine/): {shown}{more}"


def _readable(rt: Runtime, name: str) -> tuple[dict[int, Any], list[int]]:
    """The items of stream ``name`` by index, and the indexes a repair replaced."""
    world = rt.world
    try:
        length = world.stream_length(name)
    except WorldError:
        return {}, []
    items: dict[int, Any] = {}
    for start in range(0, length, _CHUNK):
        with contextlib.suppress(WorldError):
            items.update(enumerate(world.stream_read(name, start, start + _CHUNK), start))
    lost = [i for i, item in items.items() if isinstance(item, LostItem)]
    return {i: item for i, item in items.items() if not isinstance(item, LostItem)}, lost


def _turns(sid: str, journal: list[tuple[int, JournalRecord]]) -> Callable[[int], int | None]:
    """The turn a journal position belongs to: the one its session's generation runs (the
    generation's snapshot counts the turns before it)."""
    starts: list[tuple[int, int]] = []
    for pos, rec in journal:
        if rec.get("run") == sid and rec.get("t") in ("start", "gen"):
            data = rec.get("input")
            if isinstance(data, dict):
                try:
                    turns = migrate(dict(data)).get("turns", 0)
                except ValueError:
                    continue
                if isinstance(turns, int):
                    starts.append((pos, turns + 1))

    def turn_at(pos: int) -> int | None:
        before = [turn for at, turn in starts if at <= pos]
        return before[-1] if before else None

    return turn_at


def _scope(
    events: dict[int, Event], index: int, *, exact: bool = False
) -> tuple[int | None, int | None]:
    """The turn and step of the event at ``index`` (``exact``), else of the readable event
    nearest before it (or after it, when none is before)."""
    if exact:
        event = events[index]
    else:
        before = [i for i in events if i < index]
        after = [i for i in events if i > index]
        if not before and not after:
            return None, None
        event = events[max(before)] if before else events[min(after)]
    turn, step = event.get("turnId"), event.get("stepIndex")
    number = int(turn[1:]) if isinstance(turn, str) and turn[1:].isdigit() else None
    return number, step if isinstance(step, int) else None


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _QUOTE else flat[: _QUOTE - 1] + "…"


_FAMILY = re.compile(r"(?:run family|session) ([A-Za-z0-9][A-Za-z0-9_.\-]*?)(?=[\s;:,()]|$)")


def with_losses(rt: Runtime, exc: BaseException) -> str:
    """``user_message(exc)``, and for a session a repair left unable to go on, what it lost
    there by turn (`note`)."""
    from eve_cli._hints import user_message

    message = user_message(exc)
    if not isinstance(exc, CorruptJournalError) or exc.repairable:
        return message
    match = _FAMILY.search(str(exc))
    root = match.group(1) if match else stream_family(os.path.basename(exc.file))
    lost = note(rt, root) if root else ""
    return f"{message}; {lost}" if lost else message


def context_damage(rt: Runtime, sid: str) -> CorruptJournalError | None:
    """Why session ``sid`` cannot go on though its files are whole: its model context needs
    an item a repair replaced (`execution._lost.ContextLostError`), or None."""
    from eve_cli.execution import ContextLostError

    try:
        rt.history(sid)
    except ContextLostError as exc:
        return exc
    except (WorldError, LookupError, ValueError):
        return None  # other damage is the world's to report
    return None
