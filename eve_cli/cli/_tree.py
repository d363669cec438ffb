"""A session's turns → steps → actions, rebuilt from its §8 event stream (read-only).

The stream is the one record every process shares, so the tree shows the same thing whether the
session is idle, owned by another process, or interrupted mid-step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from eve_cli.cli._events import describe_request, error_text, event_request, format_call, one_line

Event = Mapping[str, Any]

_TURN_END = {
    "turn.completed": "completed",
    "turn.failed": "failed",
    "turn.cancelled": "cancelled",
    "turn.waiting": "waiting",
}


def _ms(start: Any, end: Any) -> int | None:
    try:
        a = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0, round((b - a).total_seconds() * 1000))


class _Builder:
    def __init__(self) -> None:
        self.turns: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.pending: dict[str, dict[str, Any]] = {}

    def turn(self, event: Event) -> dict[str, Any] | None:
        tid = event.get("turnId")
        if tid is None:
            return None
        turn = self.by_id.get(str(tid))
        if turn is None:
            turn = {
                "id": str(tid),
                "number": len(self.turns) + 1,
                "status": "running",
                "message": None,
                "startedAt": event.get("at"),
                "endedAt": None,
                "steps": [],
            }
            self.turns.append(turn)
            self.by_id[str(tid)] = turn
        return turn

    def step(self, turn: dict[str, Any], event: Event) -> dict[str, Any] | None:
        index = event.get("stepIndex")
        if not isinstance(index, int):
            return None
        steps: list[dict[str, Any]] = turn["steps"]
        for existing in steps:
            if existing["index"] == index:
                return existing
        step: dict[str, Any] = {
            "index": index,
            "status": "running",
            "startedAt": event.get("at"),
            "endedAt": None,
            "durationMs": None,
            "usage": None,
            "actions": [],
            "firstEvent": event.get("index"),
            "lastEvent": event.get("index"),
        }
        steps.append(step)
        return step

    def lost(self, event: Event) -> None:
        """An event a repair lost: noted in the turn it fell in (the latest)."""
        if self.turns:
            self.turns[-1].setdefault("lost", []).append(event.get("index"))

    def add(self, event: Event) -> None:
        kind = str(event.get("type"))
        turn = self.turn(event)
        if kind == "input.requested":
            request = event_request(event)
            self.pending[str(request.get("requestId"))] = request
        elif kind == "input.resolved":
            self.pending.pop(str(event.get("requestId")), None)
        elif kind in ("turn.cancelled", "context.cleared"):
            self.pending.clear()
        if turn is None:
            return
        if kind == "message.received" and turn["message"] is None:
            turn["message"] = event.get("text") or event.get("message")
        if kind in _TURN_END:
            turn["status"] = "parked" if kind == "turn.waiting" else _TURN_END[kind]
            turn["endedAt"] = event.get("at")
            if kind == "turn.failed":
                turn["error"] = error_text(event)
        if kind in ("action.result", "input.requested"):
            # A parked call gets its result in a later step: find it anywhere in the turn.
            self.call_event(turn, kind, event)
        step = self.step(turn, event)
        if step is not None:
            step["lastEvent"] = event.get("index")
            self.step_event(step, kind, event)

    def call_event(self, turn: dict[str, Any], kind: str, event: Event) -> None:
        for step in reversed(turn["steps"]):
            for action in step["actions"]:
                if action["kind"] != "tool" or action.get("callId") != event.get("callId"):
                    continue
                if kind == "input.requested":
                    action["status"] = "waiting"
                    action["waitedFor"] = event.get("kind")
                    return
                action["status"] = event.get("status") or "completed"
                action["isError"] = bool(event.get("isError"))
                action["output"] = event.get("output", event.get("result"))
                requested = action.pop("requestedAt", None)
                own = event.get("durationMs")  # the tool's run, without any approval wait
                action["durationMs"] = own if own is not None else _ms(requested, event.get("at"))
                if event.get("server"):  # an MCP server's tool: which server, which tool
                    action["server"], action["tool"] = event["server"], event.get("tool")
                return

    def step_event(self, step: dict[str, Any], kind: str, event: Event) -> None:
        if kind == "message.completed":
            step["actions"].append(
                {
                    "kind": "model",
                    "status": "completed",
                    "text": event.get("text"),
                    "durationMs": _ms(step["startedAt"], event.get("at")),
                }
            )
        elif kind == "actions.requested":
            for action in event.get("actions") or []:
                step["actions"].append(
                    {
                        "kind": "tool",
                        "callId": action.get("callId"),
                        "name": action.get("name"),
                        "arguments": action.get("arguments"),
                        "status": "requested",
                        "requestedAt": event.get("at"),
                    }
                )
        elif kind in ("step.completed", "step.failed"):
            step["status"] = "completed" if kind == "step.completed" else "failed"
            step["endedAt"] = event.get("at")
            step["durationMs"] = _ms(step["startedAt"], event.get("at"))
            step["usage"] = event.get("usage")
            if kind == "step.failed":
                step["error"] = error_text(event)


def build(events: Iterable[Event]) -> dict[str, Any]:
    """`{"turns": [...], "waits": [...]}` from a session's events in order."""
    builder = _Builder()
    for event in events:
        if event.get("type") == "event.lost":
            builder.lost(event)
        else:
            builder.add(event)
    for turn in builder.turns:
        for step in turn["steps"]:
            for action in step["actions"]:
                action.pop("requestedAt", None)
    return {"turns": builder.turns, "waits": list(builder.pending.values())}


def find_step(turns: list[dict[str, Any]], ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The turn and step `T.S` names (T: turn number from 1 or turn id; S: step index)."""
    turn_ref, sep, step_ref = ref.rpartition(".")
    if not sep or not step_ref.isdigit():
        raise ValueError(f"--step takes TURN.STEP (e.g. 2.0), not {ref!r}")
    turn = next((t for t in turns if str(t["number"]) == turn_ref or t["id"] == turn_ref), None)
    if turn is None:
        raise LookupError(f"no turn {turn_ref} (the session has {len(turns)} turns)")
    step = next((s for s in turn["steps"] if s["index"] == int(step_ref)), None)
    if step is None:
        indexes = ", ".join(str(s["index"]) for s in turn["steps"]) or "none"
        raise LookupError(f"turn {turn_ref} has no step {step_ref} (steps: {indexes})")
    return turn, step


def changes(events: Iterable[Event], first: int, last: int) -> list[str]:
    """What the checkpoint added since the previous one, one line each (from its events)."""
    lines = []
    for event in events:
        index = event.get("index")
        if not isinstance(index, int) or not first <= index <= last:
            continue
        line = describe_change(event)
        if line:
            lines.append(line)
    return lines


def _whole(text: Any) -> str:
    """A message as a person reads it: every word, later lines indented under the first."""
    return str(text).strip().replace("\n", "\n    ")


def describe_change(event: Event) -> str | None:
    kind = event.get("type")
    if kind == "message.received":
        return f"+ user: {_whole(event.get('text') or event.get('message') or '')}"
    if kind == "message.completed":
        text = event.get("text") or ""
        return f"+ assistant: {_whole(text)}" if text else "+ assistant: (tool calls only)"
    if kind == "actions.requested":
        calls = [format_call(str(a.get("name")), a.get("arguments")) for a in event["actions"]]
        return f"+ tool calls: {', '.join(calls)}"
    if kind == "action.result":
        status = event.get("status") or "completed"
        output = one_line(event.get("output", event.get("result")) or "", 2000)
        return f"+ result {event.get('name')} [{status}]: {output}"
    if kind == "input.requested":
        return f"+ waiting for {describe_request(event_request(event))}"
    if kind == "input.resolved":
        return f"+ {describe_answer(event)}"
    if kind in ("step.completed", "step.failed"):
        usage = event.get("usage")
        detail = f" usage {one_line(usage, 120)}" if usage else ""
        return f"= {kind}{detail}" if kind == "step.completed" else f"= failed: {error_text(event)}"
    if kind in ("compaction.completed", "context.cleared"):
        return f"= {kind}"
    return None


_OUTCOME_WORDS = {"rerun": "run again", "failed": "treated as failed"}


def describe_answer(event: Event) -> str:
    """What an ``input.resolved`` said: answered, approved or denied, or an outcome's answer."""
    if "answer" in event:
        return f"answered: {one_line(event['answer'], 160)}"
    if "outcome" in event:  # an interrupted call: run again | treated as failed | a result
        result = one_line(event.get("result") or "", 160)
        return _OUTCOME_WORDS.get(str(event["outcome"])) or f"result given: {result}"
    return "approved" if event.get("approved") else "denied"
