"""A session as readers see it, folded from its event stream (no lock, no replay).

Status words: ``running``, ``waiting``, ``parked`` (+ ``parkedOn``: approval | question |
subagent), ``completed``, ``failed``, ``cancelled``.
"""

from __future__ import annotations

from typing import Any


def fold(session_id: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The session view after ``events`` (each carrying its ``index``)."""
    view: dict[str, Any] = {
        "id": session_id,
        "status": "waiting",
        "parkedOn": None,
        "agent": None,
        "mode": None,
        "model": None,
        "turns": [],
        "pending": [],
        "steps": 0,
        "createdAt": None,
        "updatedAt": None,
        "events": len(events),
        "compactions": 0,
        "error": None,
    }
    turn: dict[str, Any] | None = None
    step: dict[str, Any] | None = None
    for event in events:
        kind = event.get("type", "")
        view["updatedAt"] = event.get("at", view["updatedAt"])
        if kind == "session.started":
            view["createdAt"] = event.get("at")
            for field in ("agent", "mode", "model"):
                if event.get(field) is not None:
                    view[field] = event[field]
        elif kind == "turn.started":
            turn = {"id": event.get("turnId"), "status": "running", "input": None, "steps": []}
            view["turns"].append(turn)
            view["status"], view["parkedOn"] = "running", None
        elif kind == "message.received" and turn is not None:
            turn["input"] = turn["input"] or event.get("text")
        elif kind == "step.started" and turn is not None:
            step = {
                "index": event.get("stepIndex"),
                "status": "running",
                "text": "",
                "actions": [],
                "usage": None,
            }
            turn["steps"].append(step)
            view["steps"] += 1
        elif kind == "message.completed" and step is not None:
            step["text"] = event.get("text", "")
        elif kind == "actions.requested" and step is not None:
            step["actions"] = [
                {
                    "callId": a.get("callId"),
                    "name": a.get("name"),
                    "arguments": a.get("arguments"),
                    "status": "requested",
                    "isError": False,
                }
                for a in event.get("actions", [])
            ]
        elif kind == "action.result":
            _settle_action(turn, event)
        elif kind in ("step.completed", "step.failed") and step is not None:
            step["status"] = "completed" if kind == "step.completed" else "failed"
            step["usage"] = event.get("usage")
            if event.get("error"):
                step["error"] = event["error"]
        elif kind == "input.requested":
            view["pending"].append(
                {
                    k: v
                    for k, v in event.items()
                    if k
                    in (
                        "requestId",
                        "kind",
                        "tool",
                        "arguments",
                        "question",
                        "options",
                        "callId",
                        "message",
                        "reason",
                        "turnId",
                    )
                }
            )
        elif kind == "input.resolved":
            view["pending"] = [
                p for p in view["pending"] if p.get("requestId") != event.get("requestId")
            ]
            if not view["pending"] and view["status"] == "parked":
                view["status"], view["parkedOn"] = "running", None
        elif kind == "turn.waiting":
            view["status"] = "parked"
            if event.get("on") == "tasks":
                view["parkedOn"] = "subagent"
            else:
                kinds = {p.get("kind") for p in view["pending"]}
                view["parkedOn"] = "question" if kinds == {"question"} else "approval"
        elif kind == "task.settled":
            if view["parkedOn"] == "subagent":
                view["status"], view["parkedOn"] = "running", None
        elif kind in ("turn.completed", "turn.failed", "turn.cancelled") and turn is not None:
            turn["status"] = kind.split(".")[1]
            if event.get("error"):
                turn["error"] = event["error"]
            view["status"], view["parkedOn"] = "running", None
            view["pending"] = []
        elif kind == "session.waiting":
            view["status"], view["parkedOn"] = "waiting", None
        elif kind in ("session.completed", "session.failed", "session.cancelled"):
            view["status"] = kind.split(".")[1]
            view["parkedOn"] = None
            view["error"] = event.get("error")
        elif kind == "compaction.completed" and event.get("status") == "completed":
            view["compactions"] += 1
    return view


def _settle_action(turn: dict[str, Any] | None, event: dict[str, Any]) -> None:
    if turn is None:
        return
    for step in reversed(turn["steps"]):
        for action in step["actions"]:
            if action["callId"] == event.get("callId"):
                action["status"] = event.get("status")
                action["isError"] = event.get("isError", False)
                action["output"] = event.get("output")
                return


def summary(view: dict[str, Any]) -> dict[str, Any]:
    """The row of ``sessions()``."""
    return {
        "id": view["id"],
        "status": view["status"],
        "parkedOn": view["parkedOn"],
        "agent": view["agent"],
        "turns": len(view["turns"]),
        "steps": view["steps"],
        "createdAt": view["createdAt"],
        "updatedAt": view["updatedAt"],
    }


# Events after which a session's status, parked-on and pending requests depend on nothing
# earlier: a turn starts with nothing pending (the previous turn's end cleared it).
_BOUNDARIES = frozenset({"turn.started", "session.started"})


def tail_start(events: list[dict[str, Any]]) -> int | None:
    """Position in ``events`` of the last boundary event, or None when there is none."""
    for i in range(len(events) - 1, -1, -1):
        if events[i].get("type") in _BOUNDARIES:
            return i
    return None


def fold_tail(session_id: str, tail: list[dict[str, Any]], length: int) -> dict[str, Any] | None:
    """The ``summary`` row from the events since the last boundary (``tail``, starting with
    it) and the stream's ``length``; None when the tail cannot tell (the caller folds all).

    Turn ids are ``t<n>`` counted over the session, and ``turn.started`` carries
    ``sessionSteps`` (steps before that turn), so the counts need nothing older.
    """
    view = fold(session_id, tail)
    view["events"] = length
    first = tail[0] if tail else {}
    if first.get("type") == "turn.started":
        turn_id, before = first.get("turnId"), first.get("sessionSteps")
        if not (isinstance(turn_id, str) and turn_id[1:].isdigit() and isinstance(before, int)):
            return None  # written before these fields existed
        view["turns"] = [None] * int(turn_id[1:])
        view["steps"] += before
        view["createdAt"] = None
    elif first.get("type") != "session.started" or first.get("index") != 0:
        return None
    return summary(view)
