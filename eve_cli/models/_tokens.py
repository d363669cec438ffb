"""A cheap token estimate for when a provider reports no usage.

Roughly four characters of ASCII text per token and one token per other character (CJK text
is close to one token per character), plus a small overhead per message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from eve_cli._json import JSONObject
from eve_cli.models._base import Message, ModelRequest, ToolCall, ToolSpec, Usage

__all__ = ["estimate_request", "estimate_text", "estimate_usage"]

_PER_MESSAGE = 4
# `json.dumps(value, ensure_ascii=False)` without building an encoder at every call (a step
# estimates its calls' arguments twice).
_as_json = json.JSONEncoder(ensure_ascii=False).encode


def estimate_text(text: str) -> int:
    """Estimated tokens in ``text``."""
    if not text:
        return 0
    ascii_chars = len(text.encode("ascii", "ignore"))
    return -(-ascii_chars // 4) + len(text) - ascii_chars


def message_text(message: Message) -> str:
    """The text of ``message`` that its token estimate counts: content, tool names, arguments."""
    parts: list[str] = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or ():
        parts.append(str(call.get("name", "")))
        parts.append(_as_json(call.get("arguments") or {}))
    return " ".join(parts)


# Estimates of recently seen messages, by identity: a step re-estimates the whole history, and
# without this every step costs as much as the history is long. The entry keeps the message
# alive (its id cannot be reused) and its content length guards against in-place edits.
_MEMO: dict[int, tuple[Message, int, int]] = {}
_MEMO_SIZE = 20_000


def message_tokens(message: Message) -> int:
    """Estimated tokens of one message as :func:`estimate_request` counts it."""
    content = message.get("content")
    size = len(content) if isinstance(content, str) else -1
    hit = _MEMO.get(id(message))
    if hit is not None and hit[0] is message and hit[1] == size:
        return hit[2]
    tokens = estimate_text(message_text(message)) + _PER_MESSAGE
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    _MEMO[id(message)] = (message, size, tokens)
    return tokens


# The last message list estimated, with running totals: the next step's history usually starts
# with the very same message objects, so only the new ones are estimated.
_LAST: tuple[list[Message], list[int]] = ([], [0])


def _messages_tokens(messages: list[Message]) -> int:
    seen, totals = _LAST
    n = len(seen)
    # The usual case, compared in C: the history grew at its end. (List equality takes
    # identical items as equal without looking inside; equal messages estimate the same.)
    if len(messages) < n or messages[:n] != seen:
        n, limit = 0, min(len(seen), len(messages))
        while n < limit and seen[n] is messages[n]:
            n += 1
        del totals[n + 1 :]
    seen[:] = messages  # these very objects: the next call compares by identity again
    for message in messages[n:]:
        totals.append(totals[-1] + message_tokens(message))
    return totals[-1]


def estimate_request(request: ModelRequest) -> int:
    """Estimated input tokens of ``request``: system prompt, history and tool schemas."""
    known = request.messages_tokens
    messages = known if known is not None else _messages_tokens(request.messages)
    return estimate_with(request.system, messages, request.tools)


def estimate_with(system: str, messages_tokens: int, tools: Iterable[ToolSpec]) -> int:
    """:func:`estimate_request` of a request whose messages estimate ``messages_tokens`` (the
    sum of :func:`message_tokens` over them)."""
    total = estimate_text(system) + _PER_MESSAGE + messages_tokens
    tools = tuple(tools)
    kept, tokens = _LAST_TOOLS[0]
    if tools != kept:  # (the same specs at every step: compared by identity, in C)
        tokens = sum(_tool_tokens(tool) for tool in tools)
        _LAST_TOOLS[0] = (tools, tokens)
    return total + tokens


# The tool specs last estimated, with their sum (a step estimates the same ones twice or more).
_LAST_TOOLS: list[tuple[tuple[ToolSpec, ...], int]] = [((), 0)]


# Tool schemas are estimated at every step; they change only when the agent is reloaded (a
# new parameters dict, kept alive here so its id cannot be reused).
_TOOLS: dict[tuple[str, str, int], tuple[JSONObject, int]] = {}


def _tool_tokens(tool: ToolSpec) -> int:
    key = (tool.name, tool.description, id(tool.parameters))
    hit = _TOOLS.get(key)
    if hit is not None and hit[0] is tool.parameters:
        return hit[1]
    tokens = estimate_text(_tool_text(tool))
    if len(_TOOLS) >= 1000:
        _TOOLS.clear()
    _TOOLS[key] = (tool.parameters, tokens)
    return tokens


def _tool_text(tool: ToolSpec) -> str:
    return f"{tool.name} {tool.description} {json.dumps(tool.parameters, ensure_ascii=False)}"


def estimate_usage(request: ModelRequest, text: str, calls: Iterable[ToolCall]) -> Usage:
    """Usage marked ``estimated`` for a call whose provider reported none."""
    out = estimate_text(text)
    for call in calls:
        args: Any = call.arguments if call.arguments is not None else call.raw_arguments
        out += estimate_text(call.name) + estimate_text(_as_json(args))
    return Usage(input_tokens=estimate_request(request), output_tokens=out, estimated=True)
