"""The one fold of a session's events (SPEC §8): what each event type means, in one place.

Every reader of a session asks this module, never an event's type name: the view (turns →
steps → actions, pending requests, the current turn's reply, usage, status) is one function
of (previous fold, new events), :meth:`ViewFold.feed`; the phase a delivery's receipt is
decided in (:attr:`ViewFold.phase`), the deliveries the folded events took
(:attr:`ViewFold.taken`), where a status depends on nothing earlier (:func:`fresh_start`),
which events may settle a drive (:func:`settles`) and what an event changed, as a word a
renderer switches on (:func:`change_of`) are all answered here. A new event type is declared in
`eve_cli._events` and `_event_form.TYPES`, and given its meaning here.

Status words: ``running``, ``waiting``, ``parked`` (+ ``parkedOn``: approval | question |
outcome (an interrupted call) | sleep (+ ``wakeAt``) | subagent), ``completed``, ``failed``,
``cancelled``. A turn is ``running``, ``parked`` (waiting for input, a sub-agent or a sleep),
``completed``, ``failed`` or ``cancelled``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypedDict, cast

from eve_cli._events import Event
from eve_cli._usage import add_usage, empty_usage
from eve_cli.execution._shapes import (
    ActionView,
    AnswerView,
    MarkView,
    McpView,
    PendingView,
    ReplyView,
    SessionRow,
    SessionView,
    SteerView,
    StepView,
    TaskView,
    TurnView,
)
from eve_cli.execution._stored_events import REF, iso_from_ms
from world import decode, encode

__all__ = [
    "FOLD_VERSION",
    "ActionView",
    "Change",
    "FoldState",
    "MarkView",
    "McpView",
    "Phase",
    "ReplyView",
    "SessionRow",
    "SessionView",
    "SteerView",
    "StepView",
    "TurnView",
    "ViewFold",
    "change_of",
    "fill_texts",
    "first_message",
    "fold",
    "fold_state",
    "fresh_start",
    "opens_session",
    "phase",
    "receipt_boundary",
    "refs_of",
    "restored",
    "settles",
    "taken",
    "trim",
]


# What the fold makes of events, as a number: changed whenever that changes, so a checkpoint
# of its state that an older fold stored is not read (the session is folded afresh).
FOLD_VERSION = 4

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

# -- what an event changed, as a word a renderer switches on ---------------------------------
Change = Literal[
    "user",  # a message was taken (text)
    "assistant",  # the model's reply of a step is complete (text)
    "delta",  # more of the reply streamed (delta)
    "thinking",  # more of what the model shows of its reasoning streamed (delta)
    "calls",  # the step asked for tool calls (actions)
    "result",  # a tool call ended (name, status, output)
    "waiting",  # an input request (approval, question, outcome)
    "answer",  # an input request was answered
    "step",  # a step completed (usage)
    "failed",  # a step, turn or session failed, or a repair lost an event (error)
    "parked",  # the turn parked (on)
    "marker",  # the history was compacted or cleared
]
_CHANGES: dict[str, Change] = {
    "message.received": "user",
    "message.completed": "assistant",
    "message.appended": "delta",
    "reasoning.appended": "thinking",
    "actions.requested": "calls",
    "action.result": "result",
    "input.requested": "waiting",
    "input.resolved": "answer",
    "step.completed": "step",
    "step.failed": "failed",
    "turn.failed": "failed",
    "session.failed": "failed",
    "event.lost": "failed",
    "turn.waiting": "parked",
    "compaction.completed": "marker",
    "context.cleared": "marker",
}


def change_of(event: Mapping[str, Any]) -> Change | None:
    """What ``event`` changed, for renderers (None: nothing a person reads)."""
    return _CHANGES.get(event.get("type", ""))


# -- the phase a delivery's receipt is decided in (execution._receipts) -----------------------
Phase = Literal["busy", "ending", "parked", "between", "ended"]

# The events that leave a session between turns; everything else in a turn is `busy`.
_BETWEEN = frozenset(
    {
        "session.started",
        "session.waiting",
        "turn.completed",
        "turn.failed",
        "turn.cancelled",
        "context.cleared",
        "session.completed",
        "session.failed",
        "session.cancelled",
    }
)
_BOUNDARIES = frozenset({"turn.started"} | _BETWEEN)
_FRESH = frozenset({"turn.started", "session.started"})
_PRELUDE = frozenset({"session.started", "session.waiting"})
_SETTLING = frozenset(
    {
        "turn.completed",
        "turn.waiting",
        "turn.failed",
        "turn.cancelled",
        "session.waiting",
        "session.completed",
        "session.failed",
    }
)


def receipt_boundary(event: Mapping[str, Any]) -> bool:
    """Whether the phase after ``event`` depends on nothing before it."""
    return event.get("type") in _BOUNDARIES


def fresh_start(event: Mapping[str, Any]) -> bool:
    """Whether the session's status after ``event`` depends on nothing before it (a turn
    starts with nothing pending)."""
    return event.get("type") in _FRESH


def opens_session(event: Mapping[str, Any]) -> bool:
    """What a new session's first drive emits before it takes the delivery that started it."""
    return event.get("type") in _PRELUDE


def settles(event: Mapping[str, Any]) -> bool:
    """Whether the session may have stopped running after ``event`` (its view says)."""
    return event.get("type") in _SETTLING


# The events that end a session: a message it had not taken by then never will be.
_ENDED = frozenset({"session.completed", "session.failed", "session.cancelled"})


def _phase_after(now: Phase, kind: str, event: Event) -> Phase:
    if kind in _ENDED:
        return "ended"
    if kind in _BETWEEN:
        return "between"
    if kind == "turn.waiting":
        return "busy" if event.get("on") == "sleep" else "parked"  # a steer wakes a sleep
    if kind == "step.completed":
        return "ending" if now != "parked" else now
    if kind in ("input.resolved", "task.settled"):
        return "busy"
    if kind == "event.lost":  # a repair's: says nothing of where the session is
        return now
    # Any other event of a turn: busy, unless parked (an event a parked turn writes while it
    # waits, such as input.requested, does not wake it).
    return "busy" if now != "parked" else now


def phase(events: Iterable[Mapping[str, Any]], *, task: bool = False) -> Phase:
    """The session's phase after ``events`` (read from a boundary on); ``task``: a task
    session's, whose one turn's end is followed by the session's (a message stored between
    the two is never taken: the sender waits for the end)."""
    now: Phase = "between"
    for event in events:
        kind = event.get("type", "")
        now = _phase_after(now, kind, cast(Event, event))
        if task and kind in _TURN_ENDS:
            now = "ending"
    return now


_TURN_ENDS = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})


_DISPOSITIONS = frozenset({"started", "steered", "queued"})
_ANSWERS = frozenset({"approved", "always", "answer", "outcome", "result", "by"})
_TASK = ("name", "childSessionId", "status", "output")


def taken(events: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """The deliveries ``events`` say a turn took, by delivery id: how it decided (started,
    steered, or queued for the next turn, which it then starts: the first decision is the
    receipt's; a message taken before events said how was folded in: steered)."""
    found: dict[int, str] = {}
    for event in events:
        if event.get("type") in _TAKING:
            _take(found, cast(Event, event))
    return found


_TAKING = frozenset({"message.received", "message.queued"})


def _take(found: dict[int, str], event: Event) -> None:
    delivery = event.get("deliveryId")
    if isinstance(delivery, int) and not isinstance(delivery, bool) and delivery not in found:
        said = "queued" if event.get("type") == "message.queued" else event.get("disposition")
        found[delivery] = said if said in _DISPOSITIONS else "steered"


# -- values -------------------------------------------------------------------------------------
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


# -- times -------------------------------------------------------------------------------------
def _epoch_ms(at: Any, created_ms: int) -> int | None:
    """``at`` (an ISO time as read; ms since creation as the writer's fold takes it) in ms
    since the epoch."""
    if type(at) is int:
        return created_ms + at
    if not isinstance(at, str):
        return None
    try:
        return round(datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _span(start: int | None, end: int | None) -> int | None:
    return None if start is None or end is None else max(0, end - start)


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
            "reply": None,
            "usage": empty_usage(),
            "marks": [],
        }
        self.turn: TurnView | None = None
        self.step: StepView | None = None
        self._created_ms = 0  # the base of the times :meth:`take` was given
        self.counts = [0, 0]  # turns, steps: see :meth:`row`
        self.phase: Phase = "between"  # see :func:`phase`
        self.taken: dict[int, str] = {}  # see :func:`taken`
        self._step_ms: int | None = None  # when the current step started (epoch ms)
        self._model_ms: int | None = None  # when its model call started, if not then
        self._asked: dict[Any, int | None] = {}  # the current turn's calls: when requested
        self._index = 0  # the next event's index, for events that do not carry one
        self._early: tuple[Any, int, Any] | None = None  # a step's events before its start
        # Turns and marks folded but not held (a writer's fold restored from a checkpoint).
        self.before = self.marks_before = 0
        # The history items of each turn's message and its steps' replies (by turn number,
        # then step position): a checkpoint stores their indexes, not the texts again.
        self.inputs: dict[int, int] = {}
        self.replies: dict[int, dict[int, int]] = {}

    def feed(self, events: Sequence[Mapping[str, Any]]) -> ViewFold:
        for event in cast("Sequence[Event]", events):  # read as stored: one cast, not one each
            self._apply(event)
        self.view["events"] += len(events)
        return self

    def take(self, event: Event, created_ms: int) -> None:
        """Fold one event as its writer has it, not read back: full field names, ``text``
        for the text its ``_h`` refers to, ``at`` as stored (ms since the session's
        creation, ``created_ms`` since the epoch). The event becomes the fold's; its values
        are copied as a read would give them, so nothing the writer keeps is shared."""
        for value in event.values():  # a loop, not any(...): this runs for every event
            if type(value) not in _PLAIN:
                event = as_read(event)  # a copy: its plain values as they are, the others as read
                break
        self._created_ms = created_ms
        self._apply(event)
        self.view["events"] += 1

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
            view["createdAt"] = self._iso(view["createdAt"])
        if type(view["updatedAt"]) is int:
            view["updatedAt"] = self._iso(view["updatedAt"])

    def _iso(self, at: Any) -> Any:
        if type(at) is not int:
            return at
        return iso_from_ms(self._created_ms + at)

    def _apply(self, event: Event) -> None:
        kind = event.get("type", "")
        view = self.view
        view["updatedAt"] = event.get("at", view["updatedAt"])
        index = event.get("index", self._index)
        self._index = index + 1
        if "turns" in event:
            self.counts = [event["turns"], event.get("steps", self.counts[1])]
        elif kind == "turn.started":
            self.counts[0] += 1
        elif kind == "step.started":
            self.counts[1] += 1
        self.phase = _phase_after(self.phase, kind, event)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event)
        if "stepIndex" in event:
            step, number = self.step, event["stepIndex"]
            if step is not None and number == step["index"]:
                step["lastEvent"] = index
            elif self._early is None or self._early[0] != number:
                # An event of a step not started yet (an approved call's result): the step
                # begins there, as far as its events say.
                self._early = (number, index, event.get("at"))

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
            "number": self.before + len(self.view["turns"]) + 1,
            "status": "running",
            "input": None,
            "steps": [],
            "startedAt": self._iso(event.get("at")),
            "endedAt": None,
        }
        if event.get("agentDigest"):
            turn["agentDigest"] = str(event["agentDigest"])
        if event.get("agent"):  # a moved session's turns name its agent
            self.view["agent"] = event["agent"]
        self.turn, self.step, self._asked, self._early = turn, None, {}, None
        view = self.view
        view["turns"].append(turn)
        view["status"], view["parkedOn"] = "running", None
        view["reply"] = {
            "turnId": turn["id"],
            "turn": turn["number"],
            "text": None,
            "status": "running",
        }

    def _message_received(self, event: Event) -> None:
        _take(self.taken, event)
        turn = self.turn
        if turn is None:
            return
        by = event.get("by")  # who sent it (SPEC §18)
        if turn["input"] is None:
            turn["input"] = event.get("text")
            if by:
                turn["by"] = by
            ref = cast("Mapping[str, Any]", event).get(REF)
            if isinstance(ref, int) and isinstance(turn["input"], str):
                self.inputs[turn.get("number", 0)] = ref
        elif event.get("text"):
            steer: SteerView = {"text": event["text"], "atStep": len(turn["steps"])}
            if by:
                steer["by"] = by
            turn.setdefault("steered", []).append(steer)

    def _message_appended(self, event: Event) -> None:
        step = self.step
        if step is not None and step["modelMs"] is None and event.get("delta"):
            step["text"] += event["delta"]  # the reply so far, while it streams

    def _step_started(self, event: Event) -> None:
        if self.turn is None:
            return
        index, at = event.get("index", self._index - 1), event.get("at")
        if self._early is not None and self._early[0] == event.get("stepIndex"):
            _, index, at = self._early
        self._early = None
        step: StepView = {
            "index": event.get("stepIndex"),
            "status": "running",
            "text": "",
            "actions": [],
            "usage": None,
            "startedAt": self._iso(at),
            "endedAt": None,
            "durationMs": None,
            "modelMs": None,
            "firstEvent": index,
            "lastEvent": index,
        }
        self.step = step
        self._step_ms = _epoch_ms(at, self._created_ms)
        self._model_ms = None
        self.turn["steps"].append(step)
        self.view["steps"] += 1

    def _message_completed(self, event: Event) -> None:
        step = self.step
        if step is None:
            return
        text = event.get("text", "")
        step["text"] = text
        _note_reply(self, event)
        began = self._model_ms if self._model_ms is not None else self._step_ms
        step["modelMs"] = _span(began, _epoch_ms(event.get("at"), self._created_ms))
        reply = self.view.get("reply")
        if text and reply is not None:
            reply["text"] = text

    def _actions_requested(self, event: Event) -> None:
        if self.step is None:
            return
        at = _epoch_ms(event.get("at"), self._created_ms)
        actions: list[ActionView] = []
        for a in event.get("actions", []):
            actions.append(
                {
                    "callId": a.get("callId"),
                    "name": a.get("name"),
                    "arguments": a.get("arguments"),
                    "status": "requested",
                    "isError": False,
                }
            )
            self._asked[a.get("callId")] = at
        self.step["actions"] = actions

    def _call(self, call_id: Any) -> ActionView | None:
        """The current turn's tool call ``call_id`` (a parked call ends in a later step)."""
        if self.turn is None:
            return None
        steps: list[StepView] = self.turn["steps"]
        for step in reversed(steps):
            for action in step["actions"]:
                if action["callId"] == call_id:
                    return cast(ActionView, action)
        return None

    def _action_result(self, event: Event) -> None:
        view = self.view
        if view["parkedOn"] == "sleep":  # the sleep's own result: it woke
            view["status"], view["parkedOn"], view["wakeAt"] = "running", None, None
            self._resume_turn()
        action = self._call(event.get("callId"))
        if action is None:
            return
        action["status"] = event.get("status")
        action["endedIn"] = event.get("stepIndex")
        action["isError"] = event.get("isError", False)
        action["output"] = event.get("output")
        own = event.get("durationMs")  # the tool's run, without any approval wait
        if own is None:
            asked = self._asked.get(event.get("callId"))
            own = _span(asked, _epoch_ms(event.get("at"), self._created_ms))
        action["durationMs"] = own
        server = event.get("server")
        if server:
            action["server"], action["tool"] = server, event.get("tool", "")

    def _step_ended(self, event: Event) -> None:
        completed = event["type"] == "step.completed"
        if completed:  # usage and cost totals, per session and turn (as `eve_cli._usage`)
            add_usage(self.view.setdefault("usage", empty_usage()), event)
            if self.turn is not None and event.get("turnId", self.turn["id"]) == self.turn["id"]:
                add_usage(self.turn.setdefault("usage", empty_usage()), event)
        step = self.step
        if step is None:
            return
        step["status"] = "completed" if completed else "failed"
        step["usage"] = event.get("usage")
        if "cost" in event:
            step["cost"] = event["cost"]
        step["endedAt"] = self._iso(event.get("at"))
        step["durationMs"] = _span(self._step_ms, _epoch_ms(event.get("at"), self._created_ms))
        if event.get("error"):
            step["error"] = event["error"]

    def _reasoning(self, event: Event) -> None:
        """What the model showed of its reasoning, whole (it replaces what streamed)."""
        if self.step is not None:
            self.step["reasoning"] = event.get("text", "")
            if event.get("redacted"):
                self.step["redacted"] = True

    def _result(self, event: Event) -> None:
        if self.turn is not None:
            self.turn["result"] = event.get("value")

    def _input_requested(self, event: Event) -> None:
        # (a PendingView's, an AnswerView's and a TaskView's fields are Event's, of the same
        # types: picked by name, which mypy cannot follow)
        asked = {k: v for k, v in event.items() if k in PENDING_FIELDS}
        self.view["pending"].append(cast(PendingView, asked))
        if "callId" in event and (action := self._call(event["callId"])) is not None:
            action["status"] = "waiting"
            action["waitedFor"] = event.get("kind", "approval")

    def _input_resolved(self, event: Event) -> None:
        view = self.view
        for asked in view["pending"]:
            if asked.get("requestId") != event.get("requestId") or "callId" not in asked:
                continue
            if (action := self._call(asked["callId"])) is not None:
                answer = {k: v for k, v in event.items() if k in _ANSWERS}
                action["answer"] = cast(AnswerView, answer)
                action["answeredIn"] = event.get("stepIndex")
        view["pending"] = [
            p for p in view["pending"] if p.get("requestId") != event.get("requestId")
        ]
        if not view["pending"] and view["status"] == "parked":
            view["status"], view["parkedOn"] = "running", None
            self._resume_turn()

    def _resume_turn(self) -> None:
        if self.turn is not None and self.turn["status"] == "parked":
            self.turn["status"] = "running"
            self._reply_status("running")

    def _reply_status(self, status: str) -> None:
        reply = self.view.get("reply")
        if reply is not None and self.turn is not None and reply["turnId"] == self.turn["id"]:
            reply["status"] = status

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
        if self.turn is not None:
            self.turn["status"], self.turn["endedAt"] = "parked", self._iso(event.get("at"))
            self._reply_status("parked")

    def _task(self, event: Event) -> None:
        action = self._call(event.get("taskId"))
        if action is not None:
            task = {k: v for k, v in event.items() if k in _TASK}
            action["task"] = {**action.get("task", {}), **cast(TaskView, task)}

    def _task_settled(self, event: Event) -> None:
        self._task(event)
        if self.view["parkedOn"] == "subagent":
            self.view["status"], self.view["parkedOn"] = "running", None
            self._resume_turn()

    def _turn_ended(self, event: Event) -> None:
        turn, view = self.turn, self.view
        if turn is None:
            return
        turn["status"] = event["type"].split(".")[1]
        turn["endedAt"] = self._iso(event.get("at"))
        if event.get("error"):
            turn["error"] = event["error"]
        if event.get("by"):
            turn["cancelledBy"] = event["by"]
        view["status"], view["parkedOn"], view["wakeAt"] = "running", None, None
        view["pending"] = []
        self._reply_status(turn["status"])

    def _cleared(self, event: Event) -> None:
        self.view["pending"] = []
        self._mark({"kind": "cleared", "turn": 0})

    def _mark(self, mark: MarkView) -> None:
        turn = self.turn
        mark["turn"] = self.before + len(self.view["turns"])
        running = turn is not None and turn["status"] in ("running", "parked")
        mark["atStep"] = len(turn["steps"]) if running and turn is not None else None
        self.view.setdefault("marks", []).append(mark)

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
        mark: MarkView = {"kind": "compaction", "turn": 0, "status": event.get("status", "")}
        if "removedMessages" in event:
            mark["removedMessages"] = event["removedMessages"]
        self._mark(mark)

    def _lost(self, event: Event) -> None:
        """An event a repair lost: noted in the turn it fell in (the latest)."""
        if self.turn is not None:
            self.turn.setdefault("lost", []).append(event.get("index", self._index - 1))


# -- checkpoints: the fold's own state, stored with the session (`execution._view`) ----------
FoldState = TypedDict(
    "FoldState",
    {
        "view": Mapping[str, Any],  # the view but its turns and marks
        "turns": list[TurnView],  # from number ``from + 1`` on
        "inputs": dict[int, int],  # their messages' history items, by turn number
        "replies": dict[int, dict[int, int]],  # their steps' replies' (turn, step position)
        "from": int,
        "marks": list[MarkView],  # from number ``marksFrom`` on
        "marksFrom": int,
        "counts": list[int],
        "phase": Phase,
        "taken": dict[int, str],
        "stepMs": int | None,
        "modelMs": int | None,
        "asked": dict[Any, int | None],
        "index": int,
        "early": tuple[Any, int, Any] | None,
        "turn": bool,  # whether the fold has a current turn (the last), and step (its last)
        "step": bool,
    },
)


def fold_state(folded: ViewFold, since: int, marks: int) -> FoldState:
    """The state of ``folded`` as a checkpoint stores it: its turns from number ``since + 1``
    on and its marks from ``marks`` on (a checkpoint stored the earlier ones), each turn's
    message and each step's reply as its history item when the fold knows it (not the text
    again: :func:`fill_texts` puts it back). :func:`restored` makes the fold again."""
    folded.times()
    view = folded.view
    skip = max(0, since - folded.before)
    turns: list[TurnView] = view["turns"][skip:]
    numbers = [t.get("number", 0) for t in turns]
    inputs = {n: folded.inputs[n] for n in numbers if n in folded.inputs}
    replies = {n: dict(folded.replies[n]) for n in numbers if n in folded.replies}
    return {
        "view": {k: v for k, v in view.items() if k not in ("turns", "marks")},
        "turns": [_without_texts(t, t.get("number", 0) in inputs, replies) for t in turns],
        "inputs": inputs,
        "replies": replies,
        "from": folded.before + skip,
        "marks": view.get("marks", [])[max(0, marks - folded.marks_before) :],
        "marksFrom": max(marks, folded.marks_before),
        "counts": folded.counts,
        "phase": folded.phase,
        "taken": dict(list(folded.taken.items())[-_TAKEN_KEPT:]),
        "stepMs": folded._step_ms,
        "modelMs": folded._model_ms,
        "asked": folded._asked,
        "index": folded._index,
        "early": folded._early,
        "turn": folded.turn is not None,
        "step": folded.step is not None,
    }


def _without_texts(
    turn: TurnView, referred: bool, replies: Mapping[int, Mapping[int, int]]
) -> TurnView:
    """``turn`` without the texts a history item holds (its message when ``referred``, its
    steps' replies that ``replies`` refers to), the rest shared."""
    refs = replies.get(turn.get("number", 0), {})
    if not referred and not refs:
        return turn
    out = cast(TurnView, {**turn, "input": None} if referred else dict(turn))
    if refs:
        out["steps"] = [
            cast(StepView, {**step, "text": ""}) if at in refs else step
            for at, step in enumerate(turn["steps"])
        ]
    return out


def restored(
    session_id: str, state: FoldState, turns: list[TurnView], marks: list[MarkView]
) -> ViewFold:
    """The fold whose :func:`fold_state` is ``state``, holding ``turns`` and ``marks`` before
    the state's own (the latest of those before them; none: the fold holds only the state's,
    enough to fold more events, checkpoint them and show its latest turns)."""
    folded = ViewFold(session_id)
    held = [*turns, *state["turns"]]
    folded.view = cast(SessionView, {**state["view"], "id": session_id, "turns": held})
    folded.view["marks"] = [*marks, *state["marks"]]
    folded.before = state["from"] - len(turns)
    folded.marks_before = state["marksFrom"] - len(marks)
    folded.inputs, folded.counts = dict(state["inputs"]), list(state["counts"])
    folded.replies = {n: dict(r) for n, r in state["replies"].items()}
    folded.phase, folded.taken = state["phase"], dict(state["taken"])
    folded._step_ms, folded._model_ms = state["stepMs"], state["modelMs"]
    folded._asked, folded._index, folded._early = state["asked"], state["index"], state["early"]
    if state["turn"] and held:
        folded.turn = held[-1]
        steps = held[-1]["steps"]
        folded.step = steps[-1] if state["step"] and steps else None
    return folded


def trim(folded: ViewFold, turns: int, marks: int) -> None:
    """Let ``folded`` hold only its turns from number ``turns`` on and its marks from number
    ``marks`` on (a checkpoint holds the earlier ones): what it holds stays flat."""
    drop = max(0, min(turns - 1 - folded.before, len(folded.view["turns"]) - 1))
    if drop:
        del folded.view["turns"][:drop]
        folded.before += drop
        for n in [n for n in folded.inputs if n <= folded.before]:
            del folded.inputs[n]
        for n in [n for n in folded.replies if n <= folded.before]:
            del folded.replies[n]
    held = folded.view.get("marks", [])
    cut = max(0, min(marks - folded.marks_before, len(held)))
    if cut:
        del held[:cut]
        folded.marks_before += cut


def refs_of(state: FoldState, numbers: Iterable[int] | None = None) -> set[int]:
    """The history items whose texts the turns of checkpoint ``state`` refer to (those of
    turns ``numbers`` only, when given)."""
    inputs, replies = state["inputs"], state["replies"]
    wanted = set(inputs) | set(replies) if numbers is None else set(numbers)
    found = {inputs[n] for n in wanted if n in inputs}
    return found.union(*(replies[n].values() for n in wanted if n in replies))


def fill_texts(turns: Sequence[TurnView], state: FoldState, texts: Mapping[int, str]) -> None:
    """Put back the messages and replies of checkpointed ``turns`` (``state``: the checkpoint
    that refers to them, see :func:`fold_state`; ``texts``: the history items' texts)."""
    inputs, replies = state["inputs"], state["replies"]
    for turn in turns:
        number = turn.get("number", 0)
        ref = inputs.get(number)
        if ref is not None:
            turn["input"] = texts.get(ref, "")
        for at, ref in replies.get(number, {}).items():
            if at < len(turn["steps"]):
                turn["steps"][at]["text"] = texts.get(ref, "")


_TAKEN_KEPT = 16  # deliveries a checkpoint keeps of `ViewFold.taken` (the latest)


def _note_reply(folded: ViewFold, event: Event) -> None:
    """The history item a step's reply is (a checkpoint stores it, not the text again)."""
    ref = cast("Mapping[str, Any]", event).get(REF)
    if isinstance(ref, int) and folded.turn is not None and isinstance(event.get("text"), str):
        number, at = folded.turn.get("number", 0), len(folded.turn["steps"]) - 1
        folded.replies.setdefault(number, {})[at] = ref


# Handlers of the events that concern a moment of a turn rather than its shape.
def _message_queued(folded: ViewFold, event: Event) -> None:
    """A message the turn holds for the next one (which its ``message.received`` starts)."""
    _take(folded.taken, event)


def _reasoning_appended(folded: ViewFold, event: Event) -> None:
    """More of what the model shows of its reasoning, while its call runs."""
    step = folded.step
    if step is not None and step["modelMs"] is None and event.get("delta"):
        step["reasoning"] = step.get("reasoning", "") + event["delta"]


def _session_moved(fold: ViewFold, event: Event) -> None:
    if event.get("agent"):
        fold.view["agent"] = event["agent"]


def _mcp_ready(folded: ViewFold, event: Event) -> None:
    """The MCP servers' start-up before the model call: its own time, not the call's."""
    if folded.step is not None:
        folded.step["mcp"] = {
            "durationMs": event.get("durationMs"),
            "servers": list(event.get("servers") or []),
            "tools": event.get("tools"),
        }
    folded._model_ms = _epoch_ms(event.get("at"), folded._created_ms)


_Handler = Callable[[ViewFold, Event], None]
_HANDLERS: dict[str, _Handler] = {
    "session.started": ViewFold._session_started,
    "session.moved": _session_moved,
    "turn.started": ViewFold._turn_started,
    "message.received": ViewFold._message_received,
    "step.started": ViewFold._step_started,
    "message.queued": _message_queued,
    "message.appended": ViewFold._message_appended,
    "message.completed": ViewFold._message_completed,
    "actions.requested": ViewFold._actions_requested,
    "action.result": ViewFold._action_result,
    "step.completed": ViewFold._step_ended,
    "step.failed": ViewFold._step_ended,
    "input.requested": ViewFold._input_requested,
    "input.resolved": ViewFold._input_resolved,
    "turn.waiting": ViewFold._turn_waiting,
    "task.started": ViewFold._task,
    "task.settled": ViewFold._task_settled,
    "turn.completed": ViewFold._turn_ended,
    "turn.failed": ViewFold._turn_ended,
    "turn.cancelled": ViewFold._turn_ended,
    "context.cleared": ViewFold._cleared,
    "session.waiting": ViewFold._session_waiting,
    "session.completed": ViewFold._session_ended,
    "session.failed": ViewFold._session_ended,
    "session.cancelled": ViewFold._session_ended,
    "compaction.completed": ViewFold._compaction_completed,
    "reasoning.appended": _reasoning_appended,
    "reasoning.completed": ViewFold._reasoning,
    "mcp.ready": _mcp_ready,
    "result": ViewFold._result,
    "event.lost": ViewFold._lost,
}


FIRST_CHARS = 200  # of a session's first message in its listing row


def first_message(view: SessionView) -> str | None:
    """The first message of the session ``view`` folded from its first event (cut; None
    when its turns start later)."""
    turns = view["turns"]
    text = turns[0]["input"] if turns and turns[0].get("number", 1) == 1 else None
    return text[:FIRST_CHARS] if isinstance(text, str) else None


def fold(session_id: str, events: Sequence[Mapping[str, Any]]) -> SessionView:
    """The session view after ``events`` (each carrying its ``index``)."""
    return ViewFold(session_id).feed(events).view
