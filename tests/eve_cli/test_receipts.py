"""The phase a session's events leave it in, and the receipt a message gets there."""

from __future__ import annotations

from typing import Any

import pytest

from eve_cli.execution._receipts import Phase, decide, phase, taken


def _events(*kinds: str, **data: Any) -> list[dict[str, Any]]:
    return [{"type": kind, **data} for kind in kinds]


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        ((), "between"),
        (("turn.started",), "busy"),
        (("turn.started", "step.started", "step.completed"), "ending"),
        (("turn.started", "step.completed", "step.started"), "busy"),
        (("turn.started", "input.requested", "turn.waiting"), "parked"),
        (("turn.started", "turn.waiting", "input.requested"), "parked"),  # still waiting
        (("turn.started", "turn.waiting", "input.resolved"), "busy"),
        (("turn.started", "turn.waiting", "task.settled"), "busy"),
        (("turn.started", "turn.waiting", "step.completed"), "parked"),
        (("turn.started", "step.completed", "event.lost"), "ending"),
        (("turn.started", "turn.completed"), "between"),
        (("turn.started", "context.cleared"), "between"),
    ],
)
def test_the_phase_after_events(kinds: tuple[str, ...], expected: Phase) -> None:
    assert phase(_events(*kinds)) == expected


def test_a_sleeping_turn_is_busy_a_steer_wakes_it() -> None:
    assert phase(_events("turn.started") + _events("turn.waiting", on="sleep")) == "busy"
    assert phase(_events("turn.started") + _events("turn.waiting", on="input")) == "parked"


def test_the_receipt_in_each_phase() -> None:
    assert decide("between", "steer", ahead=False) == "started"
    assert decide("between", "queue", ahead=False) == "started"
    assert decide("between", "steer", ahead=True) == "steered"
    assert decide("between", "queue", ahead=True) == "queued"
    assert decide("busy", "steer", ahead=False) == "steered"
    assert decide("busy", "queue", ahead=False) == "queued"
    assert decide("parked", "steer", ahead=False) == "queued"
    assert decide("ending", "steer", ahead=False) is None  # wait for the turn's next event
    assert decide("ending", "queue", ahead=False) == "queued"


def test_a_taken_message_has_the_disposition_its_event_names() -> None:
    events = [
        {"type": "message.received", "deliveryId": 3, "disposition": "started"},
        {"type": "message.received", "deliveryId": 4},
    ]
    assert taken(events) == {3: "started", 4: "steered"}
