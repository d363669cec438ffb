"""What a delivered message's receipt says, decided from its delivery id (`world.Delivery`).

A steer message is folded into the running turn when a poll of that turn reads the inbox after
the delivery; it starts a turn when the turn ended before that (or none ran) and no message
delivered before it is still untaken. The sender reads the session's events *after* its
delivery. A turn's poll that may be its last (after a step that asked for nothing more, or for
an answer: `HookHandle.poll(settled=True)`) makes the events emitted before it readable before
it looks at the inbox; any other is followed by another poll. So:

- a turn doing a step (or just started, or having folded a message in) polls again after the
  sender's read: the message is ``steered``;
- a turn whose last event is ``step.completed`` may be at its final poll, which may have read
  the inbox before the delivery: the sender waits for the turn's next event (it follows at
  once, no model call between) — more of the turn: ``steered``; its end: as below;
- between turns or waiting: ``started``, unless a message delivered before it (by id) has no
  ``message.received`` event yet (it starts the turn, this one is folded in: ``steered``);
- a turn parked on a request queues a message (``queued``); a turn asleep (the sleep tool) is
  woken by a steer message (``steered``);
- a session that ended (a task's one turn done) without taking it: ``rejected``; a task
  whose turn ended is ``ending`` until the session's end follows (the sender waits for it).

A message's ``message.received`` event names its delivery id (``deliveryId``): once it is
there, its disposition is the receipt's. What the events mean (the phase, which deliveries were
taken) is the session fold's (`eve_cli.execution._fold`).
"""

from __future__ import annotations

from typing import Literal

from eve_cli.execution._fold import Phase, phase, receipt_boundary, taken

__all__ = ["ENDING_WAIT", "TAKEN_SCAN", "Disposition", "Phase", "decide", "phase",
           "receipt_boundary", "taken"]  # fmt: skip

Disposition = Literal["started", "steered", "queued", "rejected"]  # where a message went
ENDING_WAIT = 5.0  # seconds a sender waits for a turn at its final poll to go on or end
TAKEN_SCAN = 2048  # events read back at most to find which earlier messages were taken


def decide(now: Phase, policy: str, ahead: bool) -> Disposition | None:
    """The receipt in phase ``now`` (``ahead``: an untaken message was delivered before this
    one); None while a turn may be at its final poll (wait for its next event)."""
    if now == "ended":
        return "rejected"
    if now == "ending" and policy == "steer":
        return None
    if now == "between":
        return "steered" if ahead and policy == "steer" else "queued" if ahead else "started"
    if policy == "steer" and now != "parked":
        return "steered"
    return "queued"
