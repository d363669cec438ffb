"""The transcript a session's events make (`eve log`, `eve export`): one entry per event type
that has one, in order."""

from __future__ import annotations

from typing import Any

from eve_cli.cli._transcript import entries


def test_each_event_type_gives_its_entry() -> None:
    events: list[dict[str, Any]] = [
        {"type": "session.started", "agent": "a"},
        {"type": "message.received", "text": "hi"},
        {"type": "step.started"},
        {"type": "actions.requested", "actions": [{"callId": "c1", "name": "t", "arguments": {}}]},
        {"type": "action.result", "callId": "c1", "output": "ok", "durationMs": 4},
        {"type": "action.result", "callId": "c2", "name": "u", "status": "rejected"},
        {"type": "message.completed", "text": "  "},
        {"type": "message.completed", "text": "hello"},
        {"type": "input.resolved", "requestId": "t1:c1", "approved": True},
        {"type": "turn.cancelled"},
        {"type": "turn.failed", "error": "boom"},
        {"type": "context.cleared"},
        {"type": "compaction.completed", "status": "completed"},
        {"type": "turn.completed"},
    ]
    got = entries(events)
    assert [e["role"] for e in got] == [
        "user", "tool", "tool", "assistant", "answer", "status", "status", "status", "status",
    ]  # fmt: skip
    assert got[0]["text"] == "hi"
    assert got[1] == {
        "role": "tool", "name": "t", "arguments": {}, "output": "ok", "failed": False,
        "status": "completed", "durationMs": 4,
    }  # fmt: skip
    assert got[2]["failed"] is True and got[2]["name"] == "u" and got[2]["arguments"] is None
    assert got[3]["text"] == "hello"
    assert [e["text"] for e in got[5:]] == [
        "turn cancelled", "error: boom", "history cleared", "history compacted",
    ]  # fmt: skip
    assert "approved" in got[4]["text"]
