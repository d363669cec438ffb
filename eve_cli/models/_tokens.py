"""A cheap token estimate for when a provider reports no usage.

Roughly four characters of ASCII text per token and one token per other character (CJK text
is close to one token per character), plus a small overhead per message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from eve_cli.models._base import Message, ModelRequest, ToolCall, ToolSpec, Usage

__all__ = ["estimate_request", "estimate_text", "estimate_usage"]

_PER_MESSAGE = 4


def estimate_text(text: str) -> int:
    """Estimated tokens in ``text``."""
    if not text:
        return 0
    ascii_chars = len(text.encode("ascii", "ignore"))
    return -(-ascii_chars // 4) + len(text) - ascii_chars


def _message_text(message: Message) -> str:
    parts: list[str] = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or ():
        parts.append(str(call.get("name", "")))
        parts.append(json.dumps(call.get("arguments") or {}, ensure_ascii=False))
    return " ".join(parts)


def estimate_request(request: ModelRequest) -> int:
    """Estimated input tokens of ``request``: system prompt, history and tool schemas."""
    total = estimate_text(request.system) + _PER_MESSAGE
    for message in request.messages:
        total += estimate_text(_message_text(message)) + _PER_MESSAGE
    total += sum(estimate_text(_tool_text(tool)) for tool in request.tools)
    return total


def _tool_text(tool: ToolSpec) -> str:
    return f"{tool.name} {tool.description} {json.dumps(tool.parameters, ensure_ascii=False)}"


def estimate_usage(request: ModelRequest, text: str, calls: Iterable[ToolCall]) -> Usage:
    """Usage marked ``estimated`` for a call whose provider reported none."""
    out = estimate_text(text)
    for call in calls:
        args: Any = call.arguments if call.arguments is not None else call.raw_arguments
        out += estimate_text(call.name) + estimate_text(json.dumps(args, ensure_ascii=False))
    return Usage(input_tokens=estimate_request(request), output_tokens=out, estimated=True)
