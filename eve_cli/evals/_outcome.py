"""What a case's session did, read from its stored events (SPEC §8: the event vocabulary is
the stable contract, so no reader's view shape is assumed here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from eve_cli._events import Event

if TYPE_CHECKING:
    from eve_cli.evals._judge import JudgeRecord

# Fields of a step's usage that count as tokens (cache and reasoning ones are parts of these).
_TOKEN_FIELDS = ("inputTokens", "outputTokens")
_FAILED = ("turn.failed", "step.failed", "session.failed")


@dataclass(frozen=True)
class ToolCallMade:
    """A tool call of the run, with its result."""

    name: str
    arguments: Any
    output: Any = None
    is_error: bool = False
    status: str | None = None


@dataclass
class CaseRun:
    """A finished (or stopped) case session as expectations and checks see it."""

    session_id: str
    events: list[Event]
    reply: str = ""
    result: Any = None  # the structured result (a ``result`` event's value), when there is one
    has_result: bool = False
    tool_calls: list[ToolCallMade] = field(default_factory=list)
    steps: int = 0
    tokens: int = 0
    cost: float | None = None
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    status: str = ""
    stopped: str | None = None  # why the runner stopped driving it early (no answer left, ...)
    view: Mapping[str, Any] | None = None  # the session's view, as `Runtime.drive` gives it
    failures: list[str] = field(default_factory=list)  # the expectations it missed
    judge: JudgeRecord | None = None  # the judge's verdict

    @property
    def passed(self) -> bool:
        return not self.failures

    def called(self, name: str) -> list[ToolCallMade]:
        return [c for c in self.tool_calls if c.name == name]


def read_run(session_id: str, events: Sequence[Event]) -> CaseRun:
    """The run that ``events`` (a session's whole stream) record."""
    run = CaseRun(session_id, [copy(event) for event in events])
    calls: dict[str, ToolCallMade] = {}
    for event in events:
        _take(run, calls, event)
    run.tool_calls = list(calls.values())
    run.seconds = _seconds(events)
    return run


def _take(run: CaseRun, calls: dict[str, ToolCallMade], event: Mapping[str, Any]) -> None:
    kind = event.get("type")
    if kind == "message.completed" and event.get("text"):
        run.reply = str(event["text"])
    elif kind == "turn.started":
        run.reply = ""  # the final reply is the last turn's
    elif kind == "actions.requested":
        for action in event.get("actions") or []:
            cid = str(action.get("callId"))
            calls[cid] = ToolCallMade(str(action.get("name")), action.get("arguments"))
    elif kind == "action.result":
        cid = str(event.get("callId"))
        was = calls.get(cid) or ToolCallMade(str(event.get("name")), None)
        calls[cid] = ToolCallMade(
            was.name,
            was.arguments,
            event.get("output"),
            bool(event.get("isError")),
            event.get("status"),
        )
    elif kind in ("step.completed", "step.failed"):
        run.steps += 1
        _usage(run, event)
    elif kind == "result":
        run.result, run.has_result = _result_of(event), True
    if kind in _FAILED:
        text = _error_text(event.get("error"))
        if text not in run.errors:  # a failed step fails its turn: one error, said once
            run.errors.append(text)


def _usage(run: CaseRun, step: Mapping[str, Any]) -> None:
    usage = step.get("usage")
    if isinstance(usage, Mapping):
        run.tokens += sum(int(usage.get(k) or 0) for k in _TOKEN_FIELDS)
    cost = step.get("cost")  # US dollars, from the model's price table, when it has one
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        run.cost = (run.cost or 0.0) + float(cost)


def _result_of(event: Mapping[str, Any]) -> Any:
    for key in ("value", "result"):
        if key in event:
            return event[key]
    return None


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        return str(error.get("message") or error)
    return str(error)


def _seconds(events: Sequence[Mapping[str, Any]]) -> float:
    """From the first message received to the last event (what a user waited)."""
    start = next((e.get("at") for e in events if e.get("type") == "message.received"), None)
    end = events[-1].get("at") if events else None
    try:
        began, ended = datetime.fromisoformat(str(start)), datetime.fromisoformat(str(end))
    except ValueError:
        return 0.0
    return max(0.0, (ended - began).total_seconds())
