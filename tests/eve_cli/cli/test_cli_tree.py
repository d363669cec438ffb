"""The session tree `eve inspect` shows, rebuilt from §8 events."""

from __future__ import annotations

from typing import Any

import pytest

from eve_cli.cli import _tree
from eve_cli.cli.inspect import event_line, session_object
from eve_cli.execution import fold


def ev(index: int, type_: str, ms: int, **data: Any) -> dict[str, Any]:
    at = f"2026-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}+00:00"
    return {"type": type_, "index": index, "sessionId": "s1", "at": at, **data}


EVENTS = [
    ev(0, "session.started", 0),
    ev(1, "turn.started", 10, turnId="t1"),
    ev(2, "message.received", 10, turnId="t1", text="what time is it?"),
    ev(3, "step.started", 20, turnId="t1", stepIndex=0),
    ev(4, "message.completed", 120, turnId="t1", stepIndex=0, text=""),
    ev(5, "actions.requested", 120, turnId="t1", stepIndex=0,
       actions=[{"callId": "c1", "name": "get_current_time", "arguments": {}}]),
    ev(6, "action.result", 150, turnId="t1", stepIndex=0, callId="c1", name="get_current_time",
       status="completed", isError=False, output="2026-01-01T00:00:00+00:00"),
    ev(7, "step.completed", 160, turnId="t1", stepIndex=0, usage={"inputTokens": 5}),
    ev(8, "step.started", 170, turnId="t1", stepIndex=1),
    ev(9, "message.completed", 200, turnId="t1", stepIndex=1, text="It is midnight."),
    ev(10, "step.completed", 210, turnId="t1", stepIndex=1),
    ev(11, "turn.completed", 210, turnId="t1"),
    ev(12, "turn.started", 1000, turnId="t2"),
    ev(13, "message.received", 1000, turnId="t2", text="remember milk"),
    ev(14, "step.started", 1010, turnId="t2", stepIndex=0),
    ev(15, "message.completed", 1050, turnId="t2", stepIndex=0, text=""),
    ev(16, "actions.requested", 1050, turnId="t2", stepIndex=0,
       actions=[{"callId": "c2", "name": "save_note", "arguments": {"text": "milk"}}]),
    ev(17, "input.requested", 1050, turnId="t2", stepIndex=0, requestId="r2", kind="approval",
       callId="c2", tool="save_note", arguments={"text": "milk"}),
    ev(18, "step.completed", 1060, turnId="t2", stepIndex=0),
    ev(19, "turn.waiting", 1060, turnId="t2", on="input"),
]  # fmt: skip


def test_tree_has_turns_steps_actions_and_the_current_wait() -> None:
    tree = _tree.build(fold("s1", EVENTS))
    turns = tree["turns"]
    assert [(t["number"], t["id"], t["status"]) for t in turns] == [
        (1, "t1", "completed"),
        (2, "t2", "parked"),
    ]
    assert turns[0]["message"] == "what time is it?"
    first = turns[0]["steps"][0]
    assert first["status"] == "completed"
    assert first["durationMs"] == 140
    assert first["usage"] == {"inputTokens": 5}
    assert [a["kind"] for a in first["actions"]] == ["model", "tool"]
    tool = first["actions"][1]
    assert tool["kind"] == "tool"
    assert (tool["name"], tool["status"], tool["isError"], tool["durationMs"]) == (
        "get_current_time",
        "completed",
        False,
        30,
    )
    assert turns[1]["steps"][0]["actions"][1]["status"] == "waiting"
    assert [w["requestId"] for w in tree["waits"]] == ["r2"]


def test_resolved_and_cancelled_waits_disappear() -> None:
    resolved = [
        *EVENTS,
        ev(20, "input.resolved", 2000, turnId="t2", requestId="r2", approved=True),
        ev(21, "step.started", 2000, turnId="t2", stepIndex=1),
        ev(22, "action.result", 2040, turnId="t2", stepIndex=1, callId="c2", name="save_note",
           status="completed", isError=False, output="saved"),
    ]  # fmt: skip
    tree = _tree.build(fold("s1", resolved))
    assert tree["waits"] == []
    # The approved call ran in the next step; its result belongs to the call that asked.
    call = tree["turns"][1]["steps"][0]["actions"][1]
    assert call["kind"] == "tool"
    assert (call["status"], call["output"], call["durationMs"]) == ("completed", "saved", 990)
    assert tree["turns"][1]["steps"][1]["actions"] == []
    cancelled = [*EVENTS, ev(20, "turn.cancelled", 2000, turnId="t2")]
    tree = _tree.build(fold("s1", cancelled))
    assert tree["waits"] == []
    assert tree["turns"][1]["status"] == "cancelled"


def test_find_step_by_number_or_id_and_clear_errors() -> None:
    turns = _tree.build(fold("s1", EVENTS))["turns"]
    assert _tree.find_step(turns, "1.1")[1]["index"] == 1
    assert _tree.find_step(turns, "t2.0")[0]["id"] == "t2"
    with pytest.raises(ValueError, match=r"TURN\.STEP"):
        _tree.find_step(turns, "1")
    with pytest.raises(LookupError, match="no turn 9"):
        _tree.find_step(turns, "9.0")
    with pytest.raises(LookupError, match=r"turn 1 has no step 5 \(steps: 0, 1\)"):
        _tree.find_step(turns, "1.5")


def test_changes_between_checkpoints() -> None:
    lines = _tree.changes(EVENTS, 8, 10)
    assert lines == ["+ assistant: It is midnight.", "= step.completed"]
    lines = _tree.changes(EVENTS, 12, 18)
    assert lines[0] == "+ user: remember milk"
    assert '+ tool calls: save_note(text="milk")' in lines
    assert '+ waiting for approval to run save_note(text="milk")' in lines


def test_session_object_shape_for_json() -> None:
    obj = session_object(fold("s1", EVENTS))
    assert obj["id"] == "s1"
    assert obj["status"] == "parked"
    assert [t["id"] for t in obj["turns"]] == ["t1", "t2"]
    assert all(isinstance(t["steps"], list) for t in obj["turns"])
    assert obj["steps"] == 3
    assert obj["turnCount"] == 2
    assert obj["events"] == len(EVENTS)
    assert obj["reply"] == {"turnId": "t2", "turn": 2, "text": None, "status": "parked"}
    assert [w["requestId"] for w in obj["waits"]] == ["r2"]


def test_event_line() -> None:
    line = event_line(EVENTS[6])
    assert line.startswith("    6  2026-01-01 00:00:00  action.result")
    assert "t1.0" in line
    assert "+ result get_current_time [completed]: 2026-01-01T00:00:00+00:00" in line
