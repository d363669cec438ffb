"""A session as readers see it, folded from its event stream (no lock, no replay).

Status words: ``running``, ``waiting``, ``parked`` (+ ``parkedOn``: approval | question |
outcome (an interrupted call) | sleep (+ ``wakeAt``) | subagent), ``completed``, ``failed``,
``cancelled``.
"""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NotRequired, Required, TypedDict, cast

from eve_cli._events import Event
from eve_cli.execution._frozen import freeze
from eve_cli.execution._stored_events import iso_from_ms
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


class ActionView(TypedDict, total=False):
    """A tool call of a step, as the view shows it."""

    callId: Required[str | None]
    name: Required[str | None]
    arguments: Required[Any]
    status: Required[str | None]  # requested, then action.result's status
    isError: Required[bool]
    output: Any


class StepView(TypedDict, total=False):
    """One step of a turn: its text, its tool calls, its usage."""

    index: Required[int | None]
    status: Required[str]  # running | completed | failed
    text: Required[str]
    actions: Required[list[ActionView]]
    usage: Required[dict[str, int] | None]
    error: Any


class TurnView(TypedDict, total=False):
    """One turn: the message that started it and its steps."""

    id: Required[str | None]
    status: Required[str]  # running | completed | failed | cancelled
    input: Required[str | None]
    steps: Required[list[StepView]]
    error: Any


class SessionView(TypedDict):
    """A session as readers see it (`Runtime.session`, ``GET /sessions/{id}``)."""

    id: str
    status: str  # see the module's docstring
    parkedOn: str | None
    agent: str | None
    mode: str | None
    model: str | None
    turns: list[TurnView]
    pending: list[dict[str, Any]]  # input.requested's fields (PENDING_FIELDS)
    steps: int
    createdAt: Any  # ISO time; ms since creation while the writer's fold holds it
    updatedAt: Any
    events: int
    compactions: int
    error: Any
    wakeAt: str | None  # parked on a sleep: when it ends (ISO time)
    agentDir: NotRequired[str | None]  # added by the runtime: the folder the session runs
    resume: NotRequired[str]  # added by `eve inspect` to an interrupted session: the command
    # Added by `eve inspect` and GET /session/{id} (`Runtime.lineage`): where it was forked
    # from ({"session", "checkpoint", "at"}) and the sessions forked from it.
    forkedFrom: NotRequired[dict[str, Any] | None]
    forks: NotRequired[list[str]]


class SessionRow(TypedDict):
    """A session's row of `Runtime.sessions` (before the runtime adds its size)."""

    id: str
    status: str
    parkedOn: str | None
    agent: str | None
    turns: int
    steps: int
    updatedAt: Any
    bytes: NotRequired[int | None]  # added by the runtime: what the session stores
    forkedFrom: NotRequired[dict[str, Any]]  # added by the runtime: a fork's origin
    forks: NotRequired[list[str]]  # added by the runtime: the sessions forked from it


# The fields of input.requested a pending request keeps.
PENDING_FIELDS = (
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
_TURN_ENDS = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})
_SESSION_ENDS = frozenset({"session.completed", "session.failed", "session.cancelled"})


class ViewFold:
    """Folds events into the session view incrementally (feed new events as they come).

    Each event type has one handler (:data:`_HANDLERS`); a type without one changes only the
    view's ``updatedAt`` (and the counts, for those that carry them).
    """

    def __init__(self, session_id: str) -> None:
        self.view: SessionView = {
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
            "wakeAt": None,  # parked on a sleep: when it ends (ISO time)
        }
        self.turn: TurnView | None = None
        self.step: StepView | None = None
        self._created_ms = 0  # the base of the times :meth:`take` was given
        self.counts = [0, 0]  # turns, steps: see :meth:`row`

    def feed(self, events: Sequence[Mapping[str, Any]]) -> ViewFold:
        for event in cast("Sequence[Event]", events):  # read as stored: one cast, not one each
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
        self._apply(cast(Event, event))
        self.view["events"] += 1
        self._created_ms = created_ms

    def row(self) -> SessionRow:
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
        view = self.view
        if type(view["createdAt"]) is int:
            view["createdAt"] = iso_from_ms(self._created_ms + view["createdAt"])
        if type(view["updatedAt"]) is int:
            view["updatedAt"] = iso_from_ms(self._created_ms + view["updatedAt"])

    def _apply(self, event: Event) -> None:
        kind = event.get("type", "")
        view = self.view
        view["updatedAt"] = event.get("at", view["updatedAt"])
        if "turns" in event:
            self.counts = [event["turns"], event.get("steps", self.counts[1])]
        elif kind == "turn.started":
            self.counts[0] += 1
        elif kind == "step.started":
            self.counts[1] += 1
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event)

    # -- one handler per event type ---------------------------------------------------------------
    def _session_started(self, event: Event) -> None:
        view = self.view
        view["createdAt"] = event.get("at")
        if event.get("agent") is not None:
            view["agent"] = event["agent"]
        if event.get("mode") is not None:
            view["mode"] = event["mode"]
        if event.get("model") is not None:
            view["model"] = event["model"]

    def _turn_started(self, event: Event) -> None:
        turn: TurnView = {
            "id": event.get("turnId"),
            "status": "running",
            "input": None,
            "steps": [],
        }
        self.turn = turn
        self.view["turns"].append(turn)
        self.view["status"], self.view["parkedOn"] = "running", None

    def _message_received(self, event: Event) -> None:
        if self.turn is not None:
            self.turn["input"] = self.turn["input"] or event.get("text")

    def _step_started(self, event: Event) -> None:
        if self.turn is None:
            return
        step: StepView = {
            "index": event.get("stepIndex"),
            "status": "running",
            "text": "",
            "actions": [],
            "usage": None,
        }
        self.step = step
        self.turn["steps"].append(step)
        self.view["steps"] += 1

    def _message_completed(self, event: Event) -> None:
        if self.step is not None:
            self.step["text"] = event.get("text", "")

    def _actions_requested(self, event: Event) -> None:
        if self.step is None:
            return
        self.step["actions"] = [
            {
                "callId": a.get("callId"),
                "name": a.get("name"),
                "arguments": a.get("arguments"),
                "status": "requested",
                "isError": False,
            }
            for a in event.get("actions", [])
        ]

    def _action_result(self, event: Event) -> None:
        view = self.view
        if view["parkedOn"] == "sleep":  # the sleep's own result: it woke
            view["status"], view["parkedOn"], view["wakeAt"] = "running", None, None
        if self.turn is None:
            return
        for step in reversed(self.turn["steps"]):
            for action in step["actions"]:
                if action["callId"] == event.get("callId"):
                    action["status"] = event.get("status")
                    action["isError"] = event.get("isError", False)
                    action["output"] = event.get("output")
                    return

    def _step_ended(self, event: Event) -> None:
        step = self.step
        if step is None:
            return
        step["status"] = "completed" if event["type"] == "step.completed" else "failed"
        step["usage"] = event.get("usage")
        if event.get("error"):
            step["error"] = event["error"]

    def _input_requested(self, event: Event) -> None:
        self.view["pending"].append({k: v for k, v in event.items() if k in PENDING_FIELDS})

    def _input_resolved(self, event: Event) -> None:
        view = self.view
        view["pending"] = [
            p for p in view["pending"] if p.get("requestId") != event.get("requestId")
        ]
        if not view["pending"] and view["status"] == "parked":
            view["status"], view["parkedOn"] = "running", None

    def _turn_waiting(self, event: Event) -> None:
        view = self.view
        view["status"] = "parked"
        if event.get("on") == "tasks":
            view["parkedOn"] = "subagent"
        elif event.get("on") == "sleep":
            view["parkedOn"], view["wakeAt"] = "sleep", event.get("until")
        else:
            asked = [p.get("kind") for p in view["pending"]]
            kinds = set(event.get("requests") or asked)
            alone = kinds.pop() if len(kinds) == 1 else ""
            view["parkedOn"] = alone if alone in ("question", "outcome") else "approval"

    def _task_settled(self, event: Event) -> None:
        if self.view["parkedOn"] == "subagent":
            self.view["status"], self.view["parkedOn"] = "running", None

    def _turn_ended(self, event: Event) -> None:
        turn, view = self.turn, self.view
        if turn is None:
            return
        turn["status"] = event["type"].split(".")[1]
        if event.get("error"):
            turn["error"] = event["error"]
        view["status"], view["parkedOn"], view["wakeAt"] = "running", None, None
        view["pending"] = []

    def _session_waiting(self, event: Event) -> None:
        self.view["status"], self.view["parkedOn"] = "waiting", None

    def _session_ended(self, event: Event) -> None:
        view = self.view
        view["status"] = event["type"].split(".")[1]
        view["parkedOn"] = None
        view["error"] = event.get("error")

    def _compaction_completed(self, event: Event) -> None:
        if event.get("status") == "completed":
            self.view["compactions"] += 1


_Handler = Callable[[ViewFold, Event], None]
_HANDLERS: dict[str, _Handler] = {
    "session.started": ViewFold._session_started,
    "turn.started": ViewFold._turn_started,
    "message.received": ViewFold._message_received,
    "step.started": ViewFold._step_started,
    "message.completed": ViewFold._message_completed,
    "actions.requested": ViewFold._actions_requested,
    "action.result": ViewFold._action_result,
    "step.completed": ViewFold._step_ended,
    "step.failed": ViewFold._step_ended,
    "input.requested": ViewFold._input_requested,
    "input.resolved": ViewFold._input_resolved,
    "turn.waiting": ViewFold._turn_waiting,
    "task.settled": ViewFold._task_settled,
    **dict.fromkeys(_TURN_ENDS, ViewFold._turn_ended),
    "session.waiting": ViewFold._session_waiting,
    **dict.fromkeys(_SESSION_ENDS, ViewFold._session_ended),
    "compaction.completed": ViewFold._compaction_completed,
}


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
    ) -> SessionView:
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


def _copy(view: SessionView, frozen: list[Any]) -> SessionView:
    """A copy of ``view`` sharing nothing changeable with the fold. Events change only the
    last turn, so each turn before it is frozen once (into ``frozen``) and shared from then
    on; the rest is copied afresh."""
    turns = view["turns"]
    while len(frozen) < len(turns) - 1:
        frozen.append(freeze(turns[len(frozen)]))
    rest: SessionView = {**view, "turns": turns[len(frozen) :]}
    try:  # pickle: four times faster than deepcopy on plain data
        copied: SessionView = pickle.loads(pickle.dumps(rest, pickle.HIGHEST_PROTOCOL))
    except Exception:
        copied = copy.deepcopy(rest)
    copied["turns"][:0] = frozen
    return copied


def fold(session_id: str, events: Sequence[Mapping[str, Any]]) -> SessionView:
    """The session view after ``events`` (each carrying its ``index``)."""
    return ViewFold(session_id).feed(events).view


TAIL = 16


def summary(session_id: str, tail: Sequence[Mapping[str, Any]]) -> SessionRow:
    """The row of ``sessions()`` from the last :data:`TAIL` events only (cheap for many
    sessions): status from the fold, counts from the latest event that carries them."""
    return ViewFold(session_id).feed(tail).row()
