"""``demo``: an offline, deterministic model that shows what eve does without any key.

It reads the latest message: asking for the time calls ``get_current_time``; "count the words
in ..." calls ``count_words``; "remember ..." / "note ..." calls ``save_note`` (which needs
approval); "ask me ..." calls ``ask_question``. After tool results it reports them; anything
else gets a friendly reply listing what it can do.
"""

from __future__ import annotations

import re

from eve_cli._json import JSONObject
from eve_cli.models._base import DeltaCallback, Message, Model, ModelRequest, ModelResponse
from eve_cli.models._base import ToolCall as _ToolCall
from eve_cli.models._offline import offline_summary, stream_words
from eve_cli.models._tokens import estimate_usage

DEFAULT_CONTEXT_WINDOW = 32_000

HELP = (
    "Hi! I'm eve's offline demo model. Try: \"what time is it?\", "
    '"count the words in the quick brown fox", "remember to buy milk" (asks for your '
    'approval first) or "ask me a question".'
)


class DemoModel(Model):
    """Deterministic rules over the latest message; no network, no weights."""

    def __init__(self, *, context_window: int | None = None) -> None:
        self.name = "demo"
        self.context_window = context_window or DEFAULT_CONTEXT_WINDOW

    async def generate(
        self,
        request: ModelRequest,
        on_delta: DeltaCallback | None = None,
        on_reasoning: DeltaCallback | None = None,
    ) -> ModelResponse:
        if request.purpose == "summary":
            text = offline_summary(request.messages)
            return ModelResponse(text, usage=estimate_usage(request, text, []))
        available = {spec.name for spec in request.tools}
        text, calls = _respond(request.messages, available, request.call_index)
        await stream_words(text, on_delta)
        return ModelResponse(text, calls, estimate_usage(request, text, calls), "end_turn")


def _respond(messages: list[Message], tools: set[str], index: int) -> tuple[str, list[_ToolCall]]:
    last = messages[-1] if messages else {"role": "user", "content": ""}
    if last.get("role") == "tool":
        return _report(messages), []
    text = str(last.get("content") or "")
    lowered = text.lower()

    def call(name: str, arguments: JSONObject) -> tuple[str, list[_ToolCall]]:
        return "", [_ToolCall(f"demo_{index}_0", name, arguments)]

    if "get_current_time" in tools and re.search(r"\b(time|clock|date|today)\b", lowered):
        return call("get_current_time", {})
    match = re.search(r"count (?:the )?words (?:in|of)\s*:?\s*(.+)", text, re.I | re.S)
    if "count_words" in tools and match:
        return call("count_words", {"text": match.group(1).strip()})
    match = re.search(r"\b(?:remember|note|save a note)\b\s*(?:that|to|:)?\s*(.*)", text, re.I)
    if "save_note" in tools and match:
        return call("save_note", {"text": match.group(1).strip() or text})
    if "ask_question" in tools and re.search(r"\bask me\b|\bquiz\b|\bquestion\b", lowered):
        return call(
            "ask_question",
            {"question": "What is your favourite colour?", "options": ["red", "green", "blue"]},
        )
    if not text.strip():
        return HELP, []
    return f'You said: "{_clip(text)}". {HELP}', []


def _report(messages: list[Message]) -> str:
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(message)
    lines = []
    for result in reversed(results):
        name, content = result.get("name", "tool"), str(result.get("content", ""))
        if result.get("is_error"):
            lines.append(f"{name} did not work: {content}")
        elif name == "get_current_time":
            lines.append(f"It is {content} (UTC).")
        elif name == "count_words":
            lines.append(f"That text has {content} words.")
        elif name == "ask_question":
            lines.append(f"You answered: {content}. Thanks!")
        elif name == "save_note":
            lines.append(f"Done — {content}.")
        else:
            lines.append(f"{name} returned: {_clip(content)}")
    return " ".join(lines)


def _clip(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
