"""What a delivered message's receipt says, decided from its delivery id (`world.Delivery`).

A steer message is folded into the running turn when a poll of that turn reads the inbox after
the delivery; it starts a turn when the turn ended before that (or none ran) and no message
delivered before it is still untaken. The sender reads the session's events *after* its
delivery. A turn's poll makes the events emitted before it readable before it reads the inbox
(`LocalWorld.read_inbox`), so:

- a turn doing a step (or just started, or having folded a message in) polls again after the
  sender's read: the message is ``steered``;
- a turn whose last event is ``step.completed`` may be at its final poll, which may have read
  the inbox before the delivery: the sender waits for the turn's next event (it follows at
  once, no model call between) — more of the turn: ``steered``; its end: as below;
- between turns or waiting: ``started``, unless a message delivered before it (by id) has no
  ``message.received`` event yet (it starts the turn, this one is folded in: ``steered``);
- a turn parked on a request queues a message (``queued``); a turn asleep (the sleep tool) is
  woken by a steer message (``steered``).

A message's ``message.received`` event names its delivery id (``deliveryId``): once it is
there, its disposition is the receipt's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

Phase = Literal["busy", "ending", "parked", "between"]
Disposition = Literal["started", "steered", "queued"]  # where a delivered message went
Event = Mapping[str, Any]  # an event as its readers give it (SPEC §8)
_DISPOSITIONS: frozenset[Disposition] = frozenset({"started", "steered", "queued"})

# The events that leave a session between turns; everything else in a turn is `busy`.
_BETWEEN = frozenset(
    {
        "session.started",
        "session.waiting",
        "turn.completed",
        "turn.failed",
        "turn.cancelled",
        "context.cleared",
        "session.completed",
        "session.failed",
        "session.cancelled",
    }
)
# Where a session's phase depends on nothing earlier.
BOUNDARIES = frozenset({"turn.started"} | _BETWEEN)
ENDING_WAIT = 5.0  # seconds a sender waits for a turn at its final poll to go on or end
TAKEN_SCAN = 2048  # events read back at most to find which earlier messages were taken


def _between(now: Phase, event: Event) -> Phase:
    return "between"


def _waiting(now: Phase, event: Event) -> Phase:
    return "busy" if event.get("on") == "sleep" else "parked"  # a steer wakes a sleeping turn


def _step_done(now: Phase, event: Event) -> Phase:
    return "ending" if now != "parked" else now


def _answered(now: Phase, event: Event) -> Phase:
    return "busy"


def _unchanged(now: Phase, event: Event) -> Phase:
    return now


def _in_turn(now: Phase, event: Event) -> Phase:
    """Any other event of a turn: it is busy, unless parked (an event a parked turn writes
    while it waits, such as ``input.requested``, does not wake it)."""
    return "busy" if now != "parked" else now


# The phase after an event of each type, from the phase before it.
_AFTER: dict[Any, Callable[[Phase, Event], Phase]] = {
    **dict.fromkeys(_BETWEEN, _between),
    "turn.waiting": _waiting,
    "step.completed": _step_done,
    "input.resolved": _answered,
    "task.settled": _answered,
    "event.lost": _unchanged,  # a repair's: says nothing of where the session is
}


def phase(events: Iterable[Event]) -> Phase:
    """The session's phase after ``events`` (read from a boundary on)."""
    now: Phase = "between"
    for event in events:
        now = _AFTER.get(event.get("type"), _in_turn)(now, event)
    return now


def taken_as(events: Iterable[Event], delivery: int) -> Disposition | None:
    """The disposition of the message delivered as ``delivery``, if an event says it."""
    for event in events:
        if event.get("type") == "message.received" and event.get("deliveryId") == delivery:
            said = event.get("disposition")
            return said if said in _DISPOSITIONS else "steered"
    return None


def taken_ids(events: Iterable[Event]) -> set[int]:
    """The delivery ids of the messages ``events`` say were taken."""
    return {
        event["deliveryId"]
        for event in events
        if event.get("type") == "message.received" and isinstance(event.get("deliveryId"), int)
    }


def decide(now: Phase, policy: str, ahead: bool) -> Disposition | None:
    """The receipt in phase ``now`` (``ahead``: an untaken message was delivered before this
    one); None while a turn may be at its final poll (wait for its next event)."""
    if now == "ending" and policy == "steer":
        return None
    if now == "between":
        return "steered" if ahead and policy == "steer" else "queued" if ahead else "started"
    if policy == "steer" and now != "parked":
        return "steered"
    return "queued"
