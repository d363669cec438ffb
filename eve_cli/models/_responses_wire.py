"""The Responses API wire format, stateless (``store: false``): history → ``input`` items,
stream events → answer.

Nothing is kept on the provider's side, so a reasoning model's reasoning travels in eve's
history: an answer's output items (reasoning items with their ids and ``encrypted_content``,
its message, its function calls) are kept whole in the history item's ``reasoning``
(``format: openai-responses``) and sent back as they came, in order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, Required, TypedDict

from eve_cli._json import JSONObject, JSONValue
from eve_cli.models._base import Message, ProviderCall, Reasoning, ToolCall, ToolSpec, Usage
from eve_cli.models._calls import history_arguments, make_tool_call
from eve_cli.models._shown import ShownReasoning
from eve_cli.models._structured import SchemaFormat

__all__ = ["KIND", "Body", "ResponseReader", "to_input", "to_tools"]

KIND = "openai-responses"  # the history record of its answers


class TextItem(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


class FunctionCallItem(TypedDict):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str  # JSON text


class FunctionOutputItem(TypedDict):
    type: Literal["function_call_output"]
    call_id: str
    output: str


# An answer's output items kept as they came (reasoning, provider-run tools) are the provider's.
InputItem = TextItem | FunctionCallItem | FunctionOutputItem | JSONObject


class ToolDef(TypedDict):
    type: Literal["function"]
    name: str
    description: str
    parameters: JSONObject


class ReasoningOptions(TypedDict):
    effort: str
    summary: Literal["auto"]


class TextFormat(SchemaFormat):
    type: Literal["json_schema"]


class TextOptions(TypedDict):
    format: TextFormat


class Body(TypedDict, total=False):
    """A Responses request body (a provider tool's definition is the caller's JSON)."""

    model: Required[str]
    input: Required[list[InputItem]]
    stream: Required[bool]
    store: Required[bool]
    include: Required[list[str]]
    instructions: str
    tools: list[ToolDef | JSONObject]
    max_output_tokens: int
    temperature: float
    top_p: float
    parallel_tool_calls: bool
    reasoning: ReasoningOptions
    text: TextOptions


def to_input(messages: list[Message]) -> list[InputItem]:
    """The ``input`` items of the history."""
    items: list[InputItem] = []
    for position, message in enumerate(messages):
        role = message.get("role")
        content = str(message.get("content") or "")
        if role in ("user", "system"):
            items.append({"role": role, "content": content})
        elif role == "assistant":
            items.extend(_assistant(message, content))
        elif role == "tool":
            output = content
            if message.get("is_error") and not content.lower().startswith("error"):
                output = f"Error: {content}"
            call_id = str(message.get("tool_call_id", ""))
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        else:
            raise ValueError(f"history message {position} has unknown role {role!r}")
    return items


def _assistant(message: Message, content: str) -> list[InputItem]:
    reasoning = message.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("format") == KIND:
        kept: list[InputItem] = [
            dict(i) for i in reasoning.get("items") or () if isinstance(i, dict)
        ]
        if kept:
            return kept  # the answer's own items, reasoning first, exactly as they came
    items: list[InputItem] = []
    if content:
        items.append({"role": "assistant", "content": content})
    for call in message.get("tool_calls") or ():
        items.append(
            {
                "type": "function_call",
                "call_id": str(call.get("id", "")),
                "name": str(call.get("name", "")),
                "arguments": json.dumps(history_arguments(call), ensure_ascii=False),
            }
        )
    return items


def to_tools(tools: list[ToolSpec]) -> list[ToolDef]:
    """``tools`` entries of the request body (function tools are flat here)."""
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters or {"type": "object", "properties": {}},
        }
        for tool in tools
    ]


@dataclass
class ResponseReader(ShownReasoning):
    """Folds Responses stream events into an answer."""

    items: dict[int, JSONObject] = field(default_factory=dict)  # output_index -> done item
    text: list[str] = field(default_factory=list)
    usage: Usage | None = None
    status: str | None = None
    error: str | None = None
    done: bool = False
    # (item, summary part) of the last summary delta
    summary_at: tuple[JSONValue, JSONValue] | None = None

    def feed(self, data: JSONObject) -> str:
        """Take one event; returns its text delta (possibly empty)."""
        kind = data.get("type")
        if kind == "response.output_text.delta":
            delta = str(data.get("delta") or "")
            self.text.append(delta)
            return delta
        if kind == "response.reasoning_summary_text.delta":
            self._summary_delta(data)
        elif kind == "response.output_item.done" and isinstance(item := data.get("item"), dict):
            self.items[_int(data.get("output_index"), len(self.items))] = item
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = data.get("response")
            self._finish(response if isinstance(response, dict) else {})
        elif kind == "error":
            self.error = str(data.get("message") or data.get("code") or "error")
            self.done = True
        return ""

    def _summary_delta(self, data: JSONObject) -> None:
        """A reasoning summary's text as it streams: a new part (or item) starts after a
        blank line, as :meth:`reasoning` joins them."""
        at = (data.get("item_id", data.get("output_index")), data.get("summary_index"))
        if self.summary_at is not None and at != self.summary_at:
            self.shown.append("\n\n")
        self.summary_at = at
        self.shown.append(str(data.get("delta") or ""))

    def _finish(self, response: JSONObject) -> None:
        self.done = True
        self.status = str(response.get("status") or "") or None
        output = response.get("output")
        if isinstance(output, list) and output:
            self.items = {i: item for i, item in enumerate(output) if isinstance(item, dict)}
        error = response.get("error")
        if isinstance(error, dict) and error.get("message"):
            self.error = str(error["message"])
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)

    def output(self) -> list[JSONObject]:
        return [self.items[i] for i in sorted(self.items)]

    def answer_text(self) -> str:
        parts = [
            str(part.get("text") or "")
            for item in self.output()
            if item.get("type") == "message"
            for part in _list(item.get("content"))
            if isinstance(part, dict) and part.get("type") == "output_text"
        ]
        return "".join(parts) if parts else "".join(self.text)

    def tool_calls(self) -> list[ToolCall]:
        return [
            make_tool_call(str(item.get("call_id") or item.get("id") or f"call_{n}"),
                           str(item.get("name") or ""), str(item.get("arguments") or ""))
            for n, item in enumerate(self.output())
            if item.get("type") == "function_call"
        ]  # fmt: skip

    def reasoning(self) -> Reasoning | None:
        """All output items, to be sent back as they came, when the answer reasoned or the
        provider ran tools (``providerCalls`` lists those, for the events)."""
        output = self.output()
        thoughts = [i for i in output if i.get("type") == "reasoning"]
        ran = [i for i in output if str(i.get("type", "")).endswith("_call")
               and i.get("type") != "function_call"]  # fmt: skip
        if not thoughts and not ran:
            return None
        redacted = any(item.get("encrypted_content") for item in thoughts)
        record: Reasoning = {"format": KIND, "items": output, "text": _summary(thoughts),
                             "redacted": redacted}  # fmt: skip
        if ran:
            record["providerCalls"] = [_provider_call(item) for item in ran]
        return record


def _summary(thoughts: list[JSONObject]) -> str:
    """The text of reasoning items' summaries, a blank line between parts."""
    return "\n\n".join(
        str(part.get("text") or "")
        for item in thoughts
        for part in _list(item.get("summary"))
        if isinstance(part, dict)
    )


def _list(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def _provider_call(item: JSONObject) -> ProviderCall:
    """A tool the provider ran, as the events show it."""
    return {"id": str(item.get("id") or ""), "name": str(item["type"])[: -len("_call")],
            "arguments": item.get("action"), "output": str(item.get("status") or ""),
            "isError": item.get("status") == "failed"}  # fmt: skip


def _usage(raw: JSONObject) -> Usage:
    def number(key: str, inside: JSONValue = raw) -> int:
        value = inside.get(key) if isinstance(inside, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return Usage(
        input_tokens=number("input_tokens"),
        output_tokens=number("output_tokens"),
        cache_read_tokens=number("cached_tokens", raw.get("input_tokens_details")),
        reasoning_tokens=number("reasoning_tokens", raw.get("output_tokens_details")),
    )


def _int(value: JSONValue, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
