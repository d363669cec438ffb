"""Helpers shared by the offline models (demo, scripted): token estimates, streaming a text in
word-sized deltas, and a deterministic compaction summary that costs no model call."""

from __future__ import annotations

import json
import re
from typing import Any

from eve_cli.models._base import DeltaCallback, Message, ModelRequest, Usage


def estimate_tokens(text: str) -> int:
    """Roughly four characters per token, at least one for any non-empty text."""
    return (len(text) + 3) // 4


def message_text(message: Message) -> str:
    """Everything in a message that costs input tokens."""
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        parts.append(call.get("name", ""))
        parts.append(json.dumps(call.get("arguments"), sort_keys=True, default=str))
    return " ".join(parts)


def estimate_usage(request: ModelRequest, output: str) -> Usage:
    prompt = request.system + "".join(message_text(m) for m in request.messages)
    return Usage(estimate_tokens(prompt), estimate_tokens(output), estimated=True)


async def stream_words(text: str, on_delta: DeltaCallback | None) -> None:
    """Deliver ``text`` as word-sized deltas (their concatenation is exactly ``text``)."""
    if on_delta is None or not text:
        return
    for piece in re.findall(r"\S+\s*|\s+", text):
        await on_delta(piece)


def offline_summary(messages: list[Message]) -> str:
    """A deterministic summary: who said what, one short line per message."""
    lines = []
    for message in messages:
        role = message.get("role", "?")
        text = " ".join(str(message.get("content") or "").split())
        if message.get("tool_calls"):
            names = ", ".join(c.get("name", "?") for c in message["tool_calls"])
            text = f"{text} [called {names}]".strip()
        if len(text) > 80:
            text = text[:77] + "..."
        lines.append(f"- {role}: {text}")
    return "Summary of the earlier conversation:\n" + "\n".join(lines)


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""
