"""Event form 2: the compact stored form expands to exactly the event that was packed."""

from __future__ import annotations

from typing import Any, cast

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eve_cli._events import Event
from eve_cli.execution._event_form import FIELDS, TYPES, pack, pack_parts, unpack

EVENTS: list[dict[str, Any]] = [
    {"type": "message.appended", "at": 1.5, "turnId": "t12", "stepIndex": 0, "delta": "Hi "},
    {"type": "step.completed", "at": 2.0, "turnId": "t1", "stepIndex": 3,
     "usage": {"inputTokens": 10, "outputTokens": 4}},
    {"type": "step.completed", "at": 2.0, "usage": {"outputTokens": 4, "inputTokens": 10}},
    {"type": "session.waiting", "at": 3.0, "continuationToken": "ab", "turns": 2, "steps": 5},
    {"type": "message.received", "at": 4.0, "turnId": "t2", "_h": 7, "disposition": "started"},
    {"type": "message.completed", "at": 4.0, "turnId": "x9", "role": "assistant", "_h": 8},
    {"type": "custom.event", "at": 5.0, "anything": [1, {"a": 2}]},
    {"type": "input.requested", "at": 6.0, "turnId": "t1", "requestId": "t1:c", "kind": "approval",
     "tool": "deploy", "arguments": {"s": 1, "y": 2}},
]  # fmt: skip


@pytest.mark.parametrize("event", EVENTS)
def test_pack_then_unpack_is_the_event_itself(event: dict[str, Any]) -> None:
    stored = pack(cast(Event, dict(event)))
    back = unpack(stored)
    assert back == event and list(back) == list(event)  # same fields, same order


@pytest.mark.parametrize("turn_id", [None, "t4"])
@pytest.mark.parametrize("step", [None, 2])
@pytest.mark.parametrize("data", [
    {}, {"delta": "Hi "}, {"usage": {"inputTokens": 10, "outputTokens": 4}},
    {"usage": {"outputTokens": 4, "inputTokens": 10}}, {"_h": 7, "role": "assistant"},
    {"callId": "c", "d": "mine"}, {"anything": [1, {"a": 2}]}, {"turns": 2, "steps": 5},
])  # fmt: skip
def test_packing_the_parts_stores_what_packing_the_event_does(
    turn_id: str | None, step: int | None, data: dict[str, Any]
) -> None:
    event: dict[str, Any] = {"type": "step.completed", "at": 12}
    if turn_id is not None:
        event["turnId"] = turn_id
    if step is not None:
        event["stepIndex"] = step
    whole = pack(cast(Event, {**event, **data}))
    parts = pack_parts("step.completed", 12, turn_id, step, data)
    assert list(parts.items()) == list(whole.items())


def test_data_naming_a_head_field_is_packed_as_the_event_holding_it() -> None:
    data = {"at": 9, "x": 1}
    event = cast(Event, {"type": "result", "at": 1, "turnId": "t3", **data})
    assert list(pack_parts("result", 1, "t3", None, data).items()) == list(pack(event).items())


def test_the_stored_form_is_short() -> None:
    event = EVENTS[0]
    packed = pack(cast(Event, event))
    assert len(msgpack.packb(packed)) < len(msgpack.packb(event)) - 35
    assert packed["y"] == TYPES.index("message.appended") and packed["u"] == 12


def test_data_using_a_short_name_is_stored_in_the_full_form() -> None:
    event = cast(Event, {"type": "action.result", "at": 1.0, "callId": "c", "d": "mine"})
    assert pack(event) == event and unpack(pack(event)) == event


def test_the_full_form_of_earlier_versions_reads_as_is() -> None:
    old = {"type": "message.completed", "at": "2026-01-01T00:00:00.000+00:00", "text": "x"}
    assert unpack(old) is old


def test_names_and_codes_are_distinct() -> None:
    assert len(set(FIELDS.values())) == len(FIELDS) and len(set(TYPES)) == len(TYPES)


@given(st.floats(min_value=0, max_value=253402300799.999, allow_nan=False))
def test_event_times_read_as_datetime_formats_them(at: float) -> None:
    from datetime import UTC, datetime

    from eve_cli.execution._stored_events import iso_ms

    assert iso_ms(at) == datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    stored = round(at, 3)  # as events store it
    assert iso_ms(stored) == datetime.fromtimestamp(stored, UTC).isoformat(timespec="milliseconds")


@given(st.integers(min_value=-(10**12), max_value=253402300799999))
def test_event_times_in_milliseconds_read_as_datetime_formats_them(ms: int) -> None:
    from datetime import UTC, datetime, timedelta

    from eve_cli.execution._stored_events import iso_from_ms

    moment = datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
    assert iso_from_ms(ms) == moment.isoformat(timespec="milliseconds")
