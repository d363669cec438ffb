"""The built-in ``sleep`` tool (``define_agent(sleep=True)``, SPEC §16): the turn parks on a
durable timer of the world, holding no process, thread or memory (D5), and goes on when the
timer is due — after a restart too, in whichever process drives the session then — or when a
delivery reaches the session first (a message: it is folded into the turn as a steer; a
cancel: the turn ends). The model is told how long it slept and why it woke.

Workflow code, not a step: the wait is the world's (a hook receive with a deadline), so a
replay reaches it again and finds its deadline and how it ended in the journal.
"""

from __future__ import annotations

import datetime as dt

from eve_cli._events import EventData
from eve_cli._json import JSONObject
from eve_cli.harness._host import StepHost
from eve_cli.harness._outcome import ToolCallRecord

INVALID = (
    "Invalid arguments for tool 'sleep': give seconds (a number above 0) or until (an ISO 8601 "
    "time such as 2030-01-01T09:00:00+00:00), not both"
)


def deadline(arguments: JSONObject, now: float) -> float | None:
    """When the sleep ends (seconds since the epoch); None for arguments that say no time."""
    seconds, until = arguments.get("seconds"), arguments.get("until")
    if (seconds is None) == (until is None):
        return None
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            return None
        return now + float(seconds)
    if not isinstance(until, str):
        return None
    try:
        when = dt.datetime.fromisoformat(until.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def iso(ts: float) -> str:
    """A time as the model and the events see it (UTC, whole seconds)."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


def span(seconds: float) -> str:
    """A duration in words a model reads easily: ``42 s``, ``5 min 3 s``, ``2 h 10 min``."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


async def sleep_call(host: StepHost, index: int, call: ToolCallRecord) -> tuple[str, bool]:
    """Sleep as the call asks; returns the tool result (text, is_error) for the model."""
    start = host.now()
    until = deadline(call.get("arguments") or {}, start)
    if until is None:
        return INVALID, True
    if until <= start:
        return f"Did not sleep: {iso(until)} has passed (it is {iso(start)}).", False
    data: EventData = {
        "on": "sleep",
        "until": iso(until),
        "callId": call["id"],
        "turns": host.snap.turns,
        "steps": host.snap.steps,
    }
    host.emit("turn.waiting", data, host.turn.tool(call["id"]).sleeping, index)
    woken = await host.sleep_until(until)
    slept = max(host.now() - start, 0.0)
    if woken is None:
        return f"Slept {span(slept)}, until {iso(until)}.", False
    return (
        f"Woken early by {woken} after {span(slept)} of the {span(until - start)} asked "
        f"(it is {iso(host.now())})."
    ), False
