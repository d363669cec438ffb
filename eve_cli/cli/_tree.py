"""A session's turns → steps → actions as `eve inspect` shows them: a rendering of the
session's view (`eve_cli.execution.fold`, the one fold of its events), read-only.

The stream is the one record every process shares, so the tree shows the same thing whether the
session is idle, owned by another process, or interrupted mid-step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

from eve_cli.cli._events import (
    describe_request,
    error_text,
    event_request,
    format_call,
    one_line,
    who,
)

if TYPE_CHECKING:  # `eve inspect` of an empty store loads no execution layer
    from eve_cli._usage import UsageTotals
    from eve_cli.execution import ActionView, McpView, StepView, TurnView

    class ToolLine(ActionView):
        kind: Literal["tool"]

    class McpLine(McpView):
        kind: Literal["mcp"]  # the servers' start-up, before the model call
        status: str


Event = Mapping[str, Any]


class ModelLine(TypedDict):
    kind: Literal["model"]
    status: str
    text: str | None
    durationMs: int | None


class TreeStep(TypedDict):
    """A step as the tree shows it: its actions in the order they ran."""

    index: int | None
    status: str
    startedAt: Any  # ISO times
    endedAt: Any
    durationMs: int | None
    usage: dict[str, int] | None
    actions: list[McpLine | ModelLine | ToolLine]
    firstEvent: int | None  # the indexes of its first and latest events
    lastEvent: int | None
    error: NotRequired[str]


class TreeTurn(TypedDict):
    """A turn as the tree shows it (``by``, ``cancelledBy``: who sent, who cancelled)."""

    id: str | None
    number: int | None
    status: str
    message: str | None
    startedAt: Any
    endedAt: Any
    steps: list[TreeStep]
    by: NotRequired[str]
    cancelledBy: NotRequired[str]
    error: NotRequired[str]
    lost: NotRequired[list[int]]
    usage: NotRequired[UsageTotals]


class Tree(TypedDict):
    turns: list[TreeTurn]
    waits: list[dict[str, Any]]  # the pending input requests (`event_request`)


def build(view: Mapping[str, Any]) -> Tree:
    """`{"turns": [...], "waits": [...]}` of a session view: each turn's steps list the MCP
    servers' start-up (when the step started them), the model call (once its reply is
    complete) and then the tool calls."""
    turns = [_turn(turn) for turn in view.get("turns") or []]
    waits = [event_request(p) for p in view.get("pending") or []]
    return {"turns": turns, "waits": waits}


def _turn(turn: TurnView) -> TreeTurn:
    shown: TreeTurn = {
        "id": turn.get("id"),
        "number": turn.get("number"),
        "status": turn.get("status"),
        "message": turn.get("input"),
        "startedAt": turn.get("startedAt"),
        "endedAt": turn.get("endedAt"),
        "steps": [_step(step) for step in turn.get("steps") or []],
    }
    # Who sent its message, who cancelled it (SPEC §18).
    if isinstance(by := turn.get("by"), Mapping) and (name := who({"by": by})):
        shown["by"] = name
    if isinstance(by := turn.get("cancelledBy"), Mapping) and (name := who({"by": by})):
        shown["cancelledBy"] = name
    if turn.get("error"):
        shown["error"] = error_text(turn)
    if turn.get("lost"):
        shown["lost"] = list(turn["lost"])
    if turn.get("usage"):
        shown["usage"] = turn["usage"]
    return shown


def _step(step: StepView) -> TreeStep:
    actions: list[McpLine | ModelLine | ToolLine] = []
    if mcp := step.get("mcp"):  # the servers' start-up: its own line, not the model call's
        actions.append({"kind": "mcp", "status": "completed", **mcp})
    if step.get("modelMs") is not None:  # its reply complete (the text streams before)
        actions.append(
            {
                "kind": "model",
                "status": "completed",
                "text": step.get("text"),
                "durationMs": step.get("modelMs"),
            }
        )
    actions.extend({"kind": "tool", **action} for action in step.get("actions") or [])
    shown: TreeStep = {
        "index": step.get("index"),
        "status": step.get("status"),
        "startedAt": step.get("startedAt"),
        "endedAt": step.get("endedAt"),
        "durationMs": step.get("durationMs"),
        "usage": step.get("usage"),
        "actions": actions,
        "firstEvent": step.get("firstEvent"),
        "lastEvent": step.get("lastEvent"),
    }
    if step.get("error"):
        shown["error"] = error_text(step)
    return shown


def find_step(turns: list[TreeTurn], ref: str) -> tuple[TreeTurn, TreeStep]:
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
    """One line saying what ``event`` changed (None: nothing a checkpoint lists)."""
    from eve_cli.execution import change_of  # the runtime's import, not the listing's

    change = change_of(event)
    if change is None or change in ("delta", "thinking", "parked"):
        return None
    return _DESCRIBE[change](event)


def _calls(event: Event) -> str:
    calls = [format_call(str(a.get("name")), a.get("arguments")) for a in event["actions"]]
    return f"+ tool calls: {', '.join(calls)}"


def _result(event: Event) -> str:
    status = event.get("status") or "completed"
    output = one_line(event.get("output", event.get("result")) or "", 2000)
    return f"+ result {event.get('name')} [{status}]: {output}"


def _assistant(event: Event) -> str:
    text = event.get("text") or ""
    return f"+ assistant: {_whole(text)}" if text else "+ assistant: (tool calls only)"


def _step_done(event: Event) -> str:
    usage = event.get("usage")
    return f"= {event.get('type')}" + (f" usage {one_line(usage, 120)}" if usage else "")


def _failed(event: Event) -> str | None:
    # Only a step's failure is a checkpoint's change; a turn's or session's is its status.
    return f"= failed: {error_text(event)}" if event.get("stepIndex") is not None else None


_DESCRIBE: dict[str, Callable[[Event], str | None]] = {
    "user": lambda event: f"+ {_sender(event)}: {_whole(_said(event))}",
    "assistant": _assistant,
    "calls": _calls,
    "result": _result,
    "waiting": lambda event: f"+ waiting for {describe_request(event_request(event))}",
    "answer": lambda event: f"+ {describe_answer(event)}{_by(event)}",
    "step": _step_done,
    "failed": _failed,
    "marker": lambda event: f"= {event.get('type')}",
}


def _sender(event: Event) -> str:
    """``user``, or who the user is (``user alice``) when the event records it."""
    sender = who(event)
    return f"user {sender}" if sender else "user"


def _said(event: Event) -> str:
    return str(event.get("text") or event.get("message") or "")


def _by(event: Event) -> str:
    sender = who(event)
    return f" (by {sender})" if sender else ""


_OUTCOME_WORDS = {"rerun": "run again", "failed": "treated as failed"}


def describe_answer(event: Event) -> str:
    """What an ``input.resolved`` said: answered, approved or denied, or an outcome's answer."""
    if "answer" in event:
        return f"answered: {one_line(event['answer'], 160)}"
    if "outcome" in event:  # an interrupted call: run again | treated as failed | a result
        result = one_line(event.get("result") or "", 160)
        return _OUTCOME_WORDS.get(str(event["outcome"])) or f"result given: {result}"
    return "approved" if event.get("approved") else "denied"
