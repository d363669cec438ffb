"""A session as readers see it, folded from its event stream (no lock, no replay).

Status words: ``running``, ``waiting``, ``parked`` (+ ``parkedOn``: approval | question |
subagent), ``completed``, ``failed``, ``cancelled``.
"""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from eve_cli.execution._frozen import freeze
from world import World


class ViewFold:
    """Folds events into the session view incrementally (feed new events as they come)."""

    def __init__(self, session_id: str) -> None:
        self.view: dict[str, Any] = {
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
            "events": 0,
            "compactions": 0,
            "error": None,
        }
        self.turn: dict[str, Any] | None = None
        self.step: dict[str, Any] | None = None

    def feed(self, events: list[dict[str, Any]]) -> ViewFold:
        for event in events:
            self._apply(event)
        self.view["events"] += len(events)
        return self

    def _apply(self, event: dict[str, Any]) -> None:
        view, turn, step = self.view, self.turn, self.step
        kind = event.get("type", "")
        view["updatedAt"] = event.get("at", view["updatedAt"])
        if kind == "session.started":
            view["createdAt"] = event.get("at")
            for field in ("agent", "mode", "model"):
                if event.get(field) is not None:
                    view[field] = event[field]
        elif kind == "turn.started":
            turn = self.turn = {
                "id": event.get("turnId"),
                "status": "running",
                "input": None,
                "steps": [],
            }
            view["turns"].append(turn)
            view["status"], view["parkedOn"] = "running", None
        elif kind == "message.received" and turn is not None:
            turn["input"] = turn["input"] or event.get("text")
        elif kind == "step.started" and turn is not None:
            step = self.step = {
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
                kinds = set(event.get("requests") or [p.get("kind") for p in view["pending"]])
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


class ViewCache:
    """Session views folded so far, each fed only the events appended since.

    A fold is reused only while the world's digest of the events it folded is unchanged, so
    damage to stored events is reported on the next read just as a fresh fold reports it. A
    world without digests folds afresh every time. Callers get a copy of the view; its turns
    before the last (which events no longer change) are read-only and shared by every copy
    handed out since (see :mod:`eve_cli.execution._frozen`): copying them anew for each call
    cost what the session's age does.
    """

    def __init__(self, world: World, size: int = 32) -> None:
        self.world = world
        self.size = size
        # session id -> (fold, digest of the events it folded, its finished turns frozen)
        self._folds: OrderedDict[str, tuple[ViewFold, Any, list[Any]]] = OrderedDict()

    def view(
        self, session_id: str, stream: str, read: Callable[[int], list[dict[str, Any]]]
    ) -> dict[str, Any]:
        """The view of ``session_id`` whose events are ``stream``; ``read(start)`` returns
        the stored events from ``start`` (as readers see them)."""
        cached = self._folds.pop(session_id, None)
        if (
            cached is not None
            and self.world.stream_digest(stream, cached[0].view["events"]) != cached[1]
        ):
            cached = None  # rewritten or damaged since: read it all again
        folded, frozen = (
            (cached[0], cached[2]) if cached is not None else (ViewFold(session_id), [])
        )
        checked = (folded.view["events"], cached[1]) if cached is not None else None
        folded.feed(read(folded.view["events"]))
        # What was checked just now is not read again: only the events fed since.
        digest = self.world.stream_digest(stream, folded.view["events"], checked)
        if digest is not None:
            self._folds[session_id] = (folded, digest, frozen)
            while len(self._folds) > self.size:
                self._folds.popitem(last=False)
        return _copy(folded.view, frozen)


def _copy(view: dict[str, Any], frozen: list[Any]) -> dict[str, Any]:
    """A copy of ``view`` sharing nothing changeable with the fold. Events change only the
    last turn, so each turn before it is frozen once (into ``frozen``) and shared from then
    on; the rest is copied afresh."""
    turns = view["turns"]
    while len(frozen) < len(turns) - 1:
        frozen.append(freeze(turns[len(frozen)]))
    rest = {**view, "turns": turns[len(frozen) :]}
    try:  # pickle: four times faster than deepcopy on plain data
        copied: dict[str, Any] = pickle.loads(pickle.dumps(rest, pickle.HIGHEST_PROTOCOL))
    except Exception:
        copied = copy.deepcopy(rest)
    copied["turns"][:0] = frozen
    return copied


def fold(session_id: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The session view after ``events`` (each carrying its ``index``)."""
    return ViewFold(session_id).feed(events).view


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


TAIL = 16


def summary(session_id: str, tail: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of ``sessions()`` from the last :data:`TAIL` events only (cheap for many
    sessions): status from the fold, counts from the latest event that carries them."""
    view = fold(session_id, tail)
    turns = steps = 0
    for event in tail:
        if "turns" in event:
            turns, steps = event["turns"], event.get("steps", steps)
        elif event.get("type") == "turn.started":
            turns += 1
        elif event.get("type") == "step.started":
            steps += 1
    return {
        "id": session_id,
        "status": view["status"],
        "parkedOn": view["parkedOn"],
        "agent": view["agent"],
        "turns": turns,
        "steps": steps,
        "updatedAt": view["updatedAt"],
    }
