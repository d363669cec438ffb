"""A session's conversation as a person reads it, from its §8 events: what the user said, what
the agent answered, each tool call with its arguments and result, waits and how turns ended.

`eve log` prints it; `eve chat -c/-s` shows its last exchanges on reopening. Plain text here
(a pipe); the terminal form is `RichTranscript` in `_render_rich.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TextIO, TypedDict

from eve_cli.cli._events import (
    Event,
    describe_request,
    error_text,
    event_request,
    field,
    format_call,
    one_line,
    who,
)

Role = Literal["user", "assistant", "tool", "wait", "answer", "status", "result"]
RESULT_LIMIT = 2000  # characters of a tool result in a transcript line


class Entry(TypedDict, total=False):
    """One line (or block) of a transcript."""

    role: Role
    turn: str
    text: str  # user and assistant text, a wait's or a status's description
    name: str  # tool
    arguments: Any
    output: str
    failed: bool
    status: str
    durationMs: int
    value: Any  # result: the turn's structured answer, parsed
    by: str  # who sent a message, gave an answer, cancelled or cleared (SPEC §18)


def entries(events: Iterable[Event]) -> list[Entry]:
    """The transcript of ``events`` (in stream order)."""
    calls: dict[str, tuple[str, Any]] = {}
    found: list[Entry] = []
    for event in events:
        entry = _entry(event, calls)
        if entry is not None:
            if (sender := who(event)) is not None:
                entry["by"] = sender
            turn = event.get("turnId")
            if isinstance(turn, str):
                entry["turn"] = turn
            found.append(entry)
    return found


Calls = dict[str, tuple[str, Any]]  # call id -> (tool name, arguments), as requested


def _entry(event: Event, calls: Calls) -> Entry | None:
    entry = _ENTRIES.get(str(event.get("type")))
    return entry(event, calls) if entry is not None else None


def _received(event: Event, calls: Calls) -> Entry | None:
    return {"role": "user", "text": str(field(event, "text") or field(event, "message") or "")}


def _completed(event: Event, calls: Calls) -> Entry | None:
    text = str(field(event, "text") or "")
    return {"role": "assistant", "text": text} if text.strip() else None


def _requested(event: Event, calls: Calls) -> Entry | None:
    for action in field(event, "actions") or []:
        if isinstance(action, Mapping):
            call_id = str(action.get("callId") or action.get("id") or "")
            calls[call_id] = (str(action.get("name") or "tool"), action.get("arguments"))
    return None


def _result(event: Event, calls: Calls) -> Entry | None:
    call_id = str(field(event, "callId") or "")
    name, arguments = calls.get(call_id, (str(field(event, "name") or "tool"), None))
    status = str(field(event, "status") or "completed")
    entry: Entry = {
        "role": "tool",
        "name": str(field(event, "name") or name),
        "arguments": arguments,
        "output": str(field(event, "output", field(event, "result")) or ""),
        "failed": bool(field(event, "isError")) or status in ("failed", "rejected"),
        "status": status,
    }
    duration = field(event, "durationMs")
    if isinstance(duration, int):
        entry["durationMs"] = duration
    return entry


def _result_value(event: Event, calls: Calls) -> Entry | None:
    value = field(event, "value")
    text = json.dumps(value, ensure_ascii=False, default=str)
    return {"role": "result", "value": value, "text": f"result: {text}"}


def _waiting(event: Event, calls: Calls) -> Entry | None:
    return {"role": "wait", "text": describe_request(event_request(event))}


def _failed(event: Event, calls: Calls) -> Entry | None:
    return {"role": "status", "text": f"error: {error_text(event)}"}


def _status(text: str) -> Callable[[Event, Calls], Entry | None]:
    def entry(event: Event, calls: Calls) -> Entry | None:
        return {"role": "status", "text": text}

    return entry


# The transcript entry of each event type that has one (``calls``: the calls requested so far).
_ENTRIES: dict[str, Callable[[Event, Calls], Entry | None]] = {
    "message.received": _received,
    "message.completed": _completed,
    "actions.requested": _requested,
    "action.result": _result,
    "input.requested": _waiting,
    "result": _result_value,
    "input.resolved": lambda event, calls: _resolved(event),
    "turn.cancelled": _status("turn cancelled"),
    "turn.failed": _failed,
    "session.failed": _failed,
    "event.lost": _failed,
    "context.cleared": _status("history cleared"),
    "compaction.completed": _status("history compacted"),
}


def _resolved(event: Event) -> Entry | None:
    approved, answer = field(event, "approved"), field(event, "answer")
    if approved is not None:
        word = "approved" if approved else "denied"
        return {"role": "answer", "text": f"{word} (always)" if field(event, "always") else word}
    if answer is not None:
        return {"role": "answer", "text": f"answered: {answer}"}
    return None


def last_exchanges(found: Sequence[Entry], count: int) -> tuple[list[Entry], int]:
    """The entries of the last ``count`` exchanges (each begins with a user message) and how
    many earlier exchanges were left out."""
    starts = [i for i, entry in enumerate(found) if entry.get("role") == "user"]
    if len(starts) <= count:
        return list(found), 0
    return list(found[starts[-count] :]), len(starts) - count


def tool_summary(entry: Entry, limit: int = RESULT_LIMIT) -> str:
    """``✓ name(args) → result  0.12s`` (✗ and ``failed``/``rejected`` when it failed)."""
    mark = "✗" if entry.get("failed") else "✓"
    line = f"{mark} {format_call(str(entry.get('name')), entry.get('arguments'))}"
    status = entry.get("status")
    if status == "rejected":
        line += "  rejected"
    elif entry.get("failed"):
        line += "  failed"
    output = entry.get("output") or ""
    if output:
        line += f" → {one_line(output, limit)}"
    duration = entry.get("durationMs")
    if isinstance(duration, int):
        line += f"  {duration / 1000:.2f}s"
    return line


def write_plain(found: Sequence[Entry], out: TextIO) -> None:
    """The transcript as plain text: ``› `` before what the user said, replies as written."""
    for entry in found:
        role = entry.get("role")
        if role == "user":
            text = str(entry.get("text") or "").replace("\n", "\n  ")
            sender = f"{entry['by']}: " if entry.get("by") else ""
            out.write(f"\n› {sender}{text}\n")
        elif role == "assistant":
            out.write(f"{str(entry.get('text') or '').rstrip()}\n")
        elif role == "tool":
            out.write(tool_summary(entry) + "\n")
        elif role == "wait":
            out.write(f"⏸ waiting: {entry.get('text')}\n")
        else:
            sender = f" (by {entry['by']})" if entry.get("by") else ""
            out.write(f"{entry.get('text')}{sender}\n")


def dumps(found: Sequence[Entry], session_id: str, extra: Mapping[str, Any] | None = None) -> str:
    """The transcript as one JSON document (``extra``: more top-level fields, e.g. usage)."""
    document = {"sessionId": session_id, "entries": list(found), **(extra or {})}
    return json.dumps(document, default=str, ensure_ascii=False, indent=2)
