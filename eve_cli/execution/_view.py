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
from eve_cli.execution._streams import iso_from_ms
from world import World, decode, encode

_PLAIN = frozenset((str, int, float, bool, type(None)))  # read back as they were stored


def as_read(value: Any) -> Any:
    """A copy of ``value`` as reading it back gives it: lists and str-keyed dicts of plain
    values copied as they are, anything else encoded and decoded."""
    if type(value) is dict:
        copied = {}
        for k, v in value.items():
            if type(k) is not str:
                return decode(encode(value))
            copied[k] = v if type(v) in _PLAIN else as_read(v)
        return copied
    if type(value) is list:
        return [v if type(v) in _PLAIN else as_read(v) for v in value]
    return decode(encode(value))


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
        self._created_ms = 0  # the base of the times :meth:`take` was given
        self.counts = [0, 0]  # turns, steps: see :meth:`row`

    def feed(self, events: list[dict[str, Any]]) -> ViewFold:
        for event in events:
            self._apply(event)
        self.view["events"] += len(events)
        return self

    def take(self, event: dict[str, Any], created_ms: int) -> None:
        """Fold one event as its writer has it, not read back: full field names, ``text``
        for the text its ``_h`` refers to, ``at`` as stored (ms since the session's
        creation, ``created_ms`` since the epoch). The event becomes the fold's; its values
        are copied as a read would give them, so nothing the writer keeps is shared."""
        for key, value in event.items():
            if type(value) not in _PLAIN:
                event[key] = as_read(value)
        self._apply(event)
        self.view["events"] += 1
        self._created_ms = created_ms

    def row(self) -> dict[str, Any]:
        """The ``sessions()`` row of what was folded: status, and the counts the latest event
        carrying them gives, plus the turns and steps started since."""
        self.times()
        view = self.view
        return {
            "id": view["id"],
            "status": view["status"],
            "parkedOn": view["parkedOn"],
            "agent": view["agent"],
            "turns": self.counts[0],
            "steps": self.counts[1],
            "updatedAt": view["updatedAt"],
        }

    def times(self) -> None:
        """Times taken as stored (see :meth:`take`) in their ISO form, as events have them."""
        for field in ("createdAt", "updatedAt"):
            if type(self.view[field]) is int:
                self.view[field] = iso_from_ms(self._created_ms + self.view[field])

    def _apply(self, event: dict[str, Any]) -> None:
        view, turn, step = self.view, self.turn, self.step
        kind = event.get("type", "")
        view["updatedAt"] = event.get("at", view["updatedAt"])
        if "turns" in event:
            self.counts = [event["turns"], event.get("steps", self.counts[1])]
        elif kind == "turn.started":
            self.counts[0] += 1
        elif kind == "step.started":
            self.counts[1] += 1
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


class _Kept:
    """A session's fold as kept: the digest of the first ``count`` events (what was checked
    against the stream, at most what the fold took) and its finished turns frozen."""

    __slots__ = ("count", "digest", "fold", "frozen")

    def __init__(self, fold: ViewFold, count: int, digest: Any, frozen: list[Any]) -> None:
        self.fold, self.count, self.digest, self.frozen = fold, count, digest, frozen


class ViewCache:
    """Session views folded so far, each fed only the events appended since.

    A fold is reused only while the world's digest of the events it folded is unchanged, so
    damage to stored events is reported on the next read just as a fresh fold reports it. A
    world without digests folds afresh every time. The process that writes a session's
    events feeds them to its kept fold as it writes them (:meth:`fold_at`), so a view after
    a turn reads none of them back; the digest then takes their stored bytes in. Callers get
    a copy of the view; its turns before the last (which events no longer change) are
    read-only and shared by every copy handed out since (see
    :mod:`eve_cli.execution._frozen`): copying them anew for each call cost what the
    session's age does.
    """

    def __init__(self, world: World, size: int = 32) -> None:
        self.world = world
        self.size = size
        self._folds: OrderedDict[str, _Kept] = OrderedDict()

    def fold_at(self, session_id: str, count: int) -> ViewFold | None:
        """The kept fold of ``session_id`` if it has taken exactly ``count`` events, else
        None: the writer of event ``count`` feeds it then, and with ``count`` the stream's
        length its status and row are the stored events' (no read)."""
        kept = self._folds.get(session_id)
        return kept.fold if kept is not None and kept.fold.view["events"] == count else None

    def forget(self, session_id: str) -> None:
        """Drop the kept fold (what it was fed may not have been stored)."""
        self._folds.pop(session_id, None)

    def view(
        self, session_id: str, stream: str, read: Callable[[int], list[dict[str, Any]]]
    ) -> dict[str, Any]:
        """The view of ``session_id`` whose events are ``stream``; ``read(start)`` returns
        the stored events from ``start`` (as readers see them)."""
        kept = self._folds.pop(session_id, None)
        if kept is not None and self.world.stream_digest(stream, kept.count) != kept.digest:
            kept = None  # rewritten or damaged since: read it all again
        checked = (kept.count, kept.digest) if kept is not None else None
        folded = kept.fold if kept is not None else ViewFold(session_id)
        folded.feed(read(folded.view["events"]))
        # What was checked just now is not read again: only the events fed since.
        digest = self.world.stream_digest(stream, folded.view["events"], checked)
        if digest is None and kept is not None and checked is not None:
            # Fed more than is stored (a write failed after the fold took it): fold afresh.
            folded, kept = ViewFold(session_id), None
            folded.feed(read(0))
            digest = self.world.stream_digest(stream, folded.view["events"])
        frozen = kept.frozen if kept is not None else []
        folded.times()
        if digest is not None:
            self._folds[session_id] = _Kept(folded, folded.view["events"], digest, frozen)
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
    return ViewFold(session_id).feed(tail).row()
