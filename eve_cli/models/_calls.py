"""Tool-call arguments as they arrive from a model: JSON text that may be empty or broken."""

from __future__ import annotations

import json
from typing import Any

from eve_cli._json import JSONObject
from eve_cli.models._base import Message, ToolCall

__all__ = ["history_arguments", "is_json_object", "make_tool_call"]


def make_tool_call(call_id: str, name: str, raw: str) -> ToolCall:
    """A :class:`ToolCall` from raw argument text; unparseable text never raises: it becomes
    ``arguments=None`` with ``argument_error`` and ``raw_arguments`` for the model to fix."""
    text = raw.strip()
    if not name:
        return ToolCall(
            call_id, "", None, raw_arguments=raw, argument_error="the tool call has no tool name"
        )
    if not text:
        return ToolCall(call_id, name, {})
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        error = f"arguments are not valid JSON ({exc.msg} at character {exc.pos})"
        return ToolCall(call_id, name, None, raw_arguments=raw, argument_error=error)
    if not isinstance(value, dict):
        error = f"arguments must be a JSON object, got {type(value).__name__}"
        return ToolCall(call_id, name, None, raw_arguments=raw, argument_error=error)
    return ToolCall(call_id, name, value)


def is_json_object(text: str) -> bool:
    """True when ``text`` is one complete JSON object."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def history_arguments(call: Message) -> JSONObject:
    """Arguments of a tool call stored in history; a call whose arguments were unparseable is
    replayed to the provider as ``{}`` (its error result already told the model why)."""
    arguments = call.get("arguments")
    return arguments if isinstance(arguments, dict) else {}
