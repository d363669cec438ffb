"""Reading §8 event dicts: field access that tolerates data nested under `data`, and the
compact one-line descriptions every renderer shares."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Event = Mapping[str, Any]

ERROR_TYPES = frozenset({"step.failed", "turn.failed", "session.failed"})


def who(event: Event) -> str | None:
    """Who caused ``event`` (its ``by``, SPEC §18): ``alice`` or ``alice@acme`` (a tenant);
    None when not recorded."""
    by = field(event, "by")
    if not isinstance(by, Mapping) or not by.get("subject"):
        return None
    return f"{by['subject']}@{by['tenant']}" if by.get("tenant") else str(by["subject"])


def field(event: Event, name: str, default: Any = None) -> Any:
    """`event[name]`, else `event["data"][name]`, else `default`."""
    if name in event:
        return event[name]
    data = event.get("data")
    if isinstance(data, Mapping) and name in data:
        return data[name]
    return default


def one_line(value: Any, limit: int = 160) -> str:
    """A value as a single short line (JSON for structures), cut with an ellipsis."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_call(name: str, arguments: Any, limit: int = 120) -> str:
    """`name(a=1, b="x")` from a tool name and its arguments."""
    if isinstance(arguments, Mapping):
        inner = ", ".join(
            f"{key}={json.dumps(val, default=str, ensure_ascii=False)}"
            for key, val in arguments.items()
        )
    elif arguments in (None, ""):
        inner = ""
    else:
        inner = one_line(arguments, limit)
    return f"{name}({one_line(inner, limit)})" if inner else f"{name}()"


def error_text(event: Event) -> str:
    """The error message an error event carries, as one line."""
    error = field(event, "error") or field(event, "message") or field(event, "reason")
    if isinstance(error, Mapping):
        error = error.get("message") or json.dumps(error, default=str)
    return one_line(error or event.get("type", "error"), 400)


def request_kind(request: Mapping[str, Any]) -> str:
    """`approval`, `question` or `outcome` (an interrupted call) for an input request."""
    kind = str(request.get("kind") or request.get("type") or "")
    if "question" in kind or ("question" in request and "arguments" not in request):
        return "question"
    return "outcome" if kind == "outcome" else "approval"


def describe_request(request: Mapping[str, Any]) -> str:
    """One line saying what a pending input request asks for."""
    if request_kind(request) == "question":
        text = request.get("question") or request.get("prompt") or "a question"
        options = request.get("options")
        suffix = f" (options: {', '.join(map(str, options))})" if options else ""
        return f"question: {one_line(text, 300)}{suffix}"
    name = request.get("name") or request.get("toolName") or request.get("tool")
    if request_kind(request) == "outcome":
        call = format_call(str(name), request.get("arguments"))
        return f"what became of {call}: interrupted while it ran, outcome unknown"
    if not name:  # e.g. a session limit: "reached its limit … Continue?"
        return f"approval: {one_line(request.get('message') or 'continue?', 300)}"
    return f"approval to run {format_call(str(name), request.get('arguments'))}"


def request_id(request: Mapping[str, Any]) -> str:
    return str(request.get("requestId") or request.get("id") or "")


def event_request(event: Event) -> dict[str, Any]:
    """The input request an `input.requested` event carries (flat or under `request`)."""
    nested = field(event, "request")
    if isinstance(nested, Mapping):
        return dict(nested)
    data = event.get("data")
    merged: dict[str, Any] = dict(data) if isinstance(data, Mapping) else {}
    merged.update({k: v for k, v in event.items() if k != "data"})
    return merged
