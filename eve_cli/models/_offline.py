"""Helpers shared by the offline models (demo, scripted): streaming a text in word-sized
deltas, and a deterministic compaction summary that costs no model call."""

from __future__ import annotations

import re

from eve_cli.models._base import DeltaCallback, Message


async def stream_words(text: str, on_delta: DeltaCallback | None) -> None:
    """Deliver ``text`` as word-sized deltas (their concatenation is exactly ``text``)."""
    if on_delta is None or not text:
        return
    for piece in re.findall(r"\S+\s*|\s+", text):
        await on_delta(piece)


SUMMARY_LINES = 60  # a summary is bounded, as a real model's is: the latest lines


def offline_summary(messages: list[Message]) -> str:
    """A deterministic summary: who said what, one short line per message (the latest
    :data:`SUMMARY_LINES` of them, earlier summaries' lines included)."""
    lines = []
    for message in messages:
        role = message.get("role", "?")
        content = str(message.get("content") or "")
        earlier = [line for line in content.splitlines() if line.startswith("- ")]
        if earlier:  # an earlier summary: keep its lines so nothing old is lost twice
            lines.extend(earlier)
            continue
        text = " ".join(content.split())
        if message.get("tool_calls"):
            names = ", ".join(c.get("name", "?") for c in message["tool_calls"])
            text = f"{text} [called {names}]".strip()
        if len(text) > 80:
            text = text[:77] + "..."
        lines.append(f"- {role}: {text}")
    return "Summary of the earlier conversation:\n" + "\n".join(lines[-SUMMARY_LINES:])
