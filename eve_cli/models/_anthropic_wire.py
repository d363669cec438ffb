"""The Messages API wire format: neutral history → request body, stream events → answer.

The API wants strictly alternating roles starting with ``user``: consecutive turns of one role
are merged, tool results travel as ``tool_result`` blocks in a user turn (before any text).
"""

from __future__ import annotations

import base64
import json
from copy import copy
from dataclasses import dataclass, field
from typing import Literal, NotRequired, Required, TypedDict

from eve_cli._json import JSONObject, JSONValue
from eve_cli.models._base import Message, ProviderCall, Reasoning, ToolCall, ToolSpec, Usage
from eve_cli.models._calls import history_arguments, make_tool_call
from eve_cli.models._shown import ShownReasoning

__all__ = [
    "ERROR_STATUS",
    "Body",
    "EventReader",
    "ToolDef",
    "mark_cache",
    "to_messages",
    "to_tools",
]


class CacheControl(TypedDict):
    type: Literal["ephemeral"]


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str
    cache_control: NotRequired[CacheControl]


class ImageSource(TypedDict):
    type: Literal["base64"]
    media_type: str
    data: str


class ImageBlock(TypedDict):
    type: Literal["image"]
    source: ImageSource


class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    is_error: bool
    content: NotRequired[str | list[TextBlock | ImageBlock]]
    cache_control: NotRequired[CacheControl]


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: JSONObject


# An answer's blocks kept as they came (thinking, provider-executed tools) are the provider's.
AssistantBlock = TextBlock | ToolUseBlock | JSONObject
UserBlock = TextBlock | ToolResultBlock


class UserTurn(TypedDict):
    role: Literal["user"]
    content: list[UserBlock]


class AssistantTurn(TypedDict):
    role: Literal["assistant"]
    content: list[AssistantBlock]


Turn = UserTurn | AssistantTurn


class ToolDef(TypedDict):
    name: str
    description: str
    input_schema: JSONObject
    cache_control: NotRequired[CacheControl]


class Thinking(TypedDict):
    type: Literal["enabled"]
    budget_tokens: int


class ToolChoice(TypedDict, total=False):
    type: str
    disable_parallel_tool_use: bool


class Body(TypedDict, total=False):
    """A Messages API request body (a provider tool's definition is the caller's JSON)."""

    model: Required[str]
    messages: Required[list[Turn]]
    stream: Required[bool]
    system: str | list[TextBlock]
    tools: list[ToolDef | JSONObject]
    max_tokens: int
    thinking: Thinking
    temperature: float
    top_p: float
    stop_sequences: list[str]
    tool_choice: ToolChoice


#: HTTP status each error type stands for, when it arrives inside a stream.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

# Stands in when the history would otherwise not start with a user turn.
_OPENING = "(The conversation continues.)"


def to_messages(system: str, messages: list[Message]) -> tuple[str, list[Turn]]:
    """``(system, messages)`` of the request body."""
    systems = [system] if system else []
    turns: list[Turn] = []
    for position, message in enumerate(messages):
        role = message.get("role")
        content = str(message.get("content") or "")
        if role == "system":
            systems.append(content)
        elif role == "user":
            _add_user(turns, [_text_block(content)] if content.strip() else [])
        elif role == "assistant":
            _add_assistant(
                turns,
                _thinking(message) + _assistant_blocks(content, message.get("tool_calls") or []),
            )
        elif role == "tool":
            _add_user(turns, [_tool_result(message, content)])
        else:
            raise ValueError(f"history message {position} has unknown role {role!r}")
    for turn in turns:
        if turn["role"] == "user":
            # Tool results must open their user turn; sorted() keeps the order otherwise.
            turn["content"] = sorted(turn["content"], key=lambda b: b["type"] != "tool_result")
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [_text_block(_OPENING)]})
    return "\n\n".join(systems), turns


def _text_block(text: str) -> TextBlock:
    return {"type": "text", "text": text}


def _tool_result(message: Message, content: str) -> ToolResultBlock:
    block: ToolResultBlock = {
        "type": "tool_result",
        "tool_use_id": str(message.get("tool_call_id", "")),
        "is_error": bool(message.get("is_error")),
    }
    if content:
        block["content"] = content
    if images := _images(message):  # an MCP tool's images, kept as bytes in history
        block["content"] = [_text_block(content or "(image)"), *images]
    return block


_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")  # what the API takes


def _images(message: Message) -> list[ImageBlock]:
    """A tool message's images as ``image`` blocks (other kinds stay in its text)."""
    blocks: list[ImageBlock] = []
    for part in message.get("parts") or []:
        data = part.get("data") if isinstance(part, dict) else None
        if part.get("type") == "image" and part.get("mimeType") in _IMAGE_TYPES and data:
            encoded = base64.b64encode(data).decode() if isinstance(data, bytes) else str(data)
            source: ImageSource = {
                "type": "base64", "media_type": str(part["mimeType"]), "data": encoded
            }  # fmt: skip
            blocks.append({"type": "image", "source": source})
    return blocks


def _assistant_blocks(text: str, calls: list[Message]) -> list[AssistantBlock]:
    blocks: list[AssistantBlock] = [_text_block(text)] if text.strip() else []
    for call in calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id", "")),
                "name": str(call.get("name", "")),
                "input": history_arguments(call),
            }
        )
    return blocks


def _thinking(message: Message) -> list[AssistantBlock]:
    """The blocks an Anthropic answer kept, exactly as they came: thinking (signatures too),
    and the calls and results of tools the provider ran."""
    reasoning = message.get("reasoning")
    if not isinstance(reasoning, dict) or reasoning.get("format") != "anthropic":
        return []
    return [dict(b) for b in reasoning.get("blocks") or () if isinstance(b, dict)]


def _add_assistant(turns: list[Turn], blocks: list[AssistantBlock]) -> None:
    if not blocks:
        return
    if turns and turns[-1]["role"] == "assistant":
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": "assistant", "content": blocks})


def _add_user(turns: list[Turn], blocks: list[UserBlock]) -> None:
    if not blocks:
        return
    if turns and turns[-1]["role"] == "user":
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": "user", "content": blocks})


_EPHEMERAL: CacheControl = {"type": "ephemeral"}


def mark_cache(body: Body) -> None:
    """Prompt-cache breakpoints (at most 4): the tools, the system prompt, and the history up
    to its last user turn and up to the user turn before it. A request's last mark is where
    the next request of the session finds its cache (its second-to-last mark is there), so
    each call reads what the one before wrote; after a compaction the marks move with the
    history, never adding up."""
    tools = body.get("tools")
    if tools:
        last = copy(tools[-1])
        last["cache_control"] = {"type": "ephemeral"}
        tools[-1] = last
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
    users = [m for m in body["messages"] if m["role"] == "user"]
    for turn in users[-2:]:  # a user turn holds text and tool results, each markable
        if turn["content"]:
            marked = copy(turn["content"][-1])
            marked["cache_control"] = _EPHEMERAL
            turn["content"][-1] = marked


def to_tools(tools: list[ToolSpec]) -> list[ToolDef]:
    """``tools`` entries of the request body."""
    return [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.parameters or {"type": "object", "properties": {}},
        }
        for tool in tools
    ]


@dataclass
class _Block:
    kind: str
    text: list[str] = field(default_factory=list)  # text, or thinking
    signature: list[str] = field(default_factory=list)
    data: str = ""  # redacted_thinking
    raw: JSONObject | None = None  # a provider-executed tool's block, as it came
    id: str = ""
    name: str = ""
    input: JSONObject = field(default_factory=dict)
    json: list[str] = field(default_factory=list)


class StreamError(Exception):
    """An ``error`` event: ``kind`` is its error type."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass
class EventReader(ShownReasoning):
    """Folds Messages stream events (or one whole ``message`` object) into an answer."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read: int = 0
    cache_write: int = 0
    stop_reason: str | None = None
    stopped: bool = False

    def feed(self, data: JSONObject) -> str:
        """Take one event's data; returns its text delta (possibly empty).

        Raises:
            StreamError: the event is an ``error`` event.
        """
        kind = data.get("type")
        if kind == "message_start":
            self._message(_dict(data.get("message")), whole=False)
        elif kind == "message":
            return self._message(data, whole=True)
        elif kind == "content_block_start":
            self._start(_int(data.get("index")), _dict(data.get("content_block")))
        elif kind == "content_block_delta":
            return self._delta(_int(data.get("index")), _dict(data.get("delta")))
        elif kind == "message_delta":
            delta = _dict(data.get("delta"))
            if delta.get("stop_reason"):
                self.stop_reason = str(delta["stop_reason"])
            self._usage(_dict(data.get("usage")))
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            error = _dict(data.get("error"))
            raise StreamError(str(error.get("type") or "error"), str(error.get("message") or ""))
        return ""  # ping, content_block_stop and unknown types carry nothing we need

    def _message(self, message: JSONObject, *, whole: bool) -> str:
        self._usage(_dict(message.get("usage")))
        if not whole:
            return ""
        self.stopped = True
        self.stop_reason = str(message.get("stop_reason") or "") or None
        text = ""
        content = message.get("content")
        for index, block in enumerate(content if isinstance(content, list) else ()):
            self._start(index, _dict(block))
            if isinstance(block, dict) and block.get("type") == "text":
                text += str(block.get("text") or "")
        return text

    def _start(self, index: int, block: JSONObject) -> None:
        new = _Block(kind=str(block.get("type") or ""))
        if new.kind == "text" and block.get("text"):
            new.text.append(str(block["text"]))
        elif new.kind == "thinking":
            if any(b.kind == "thinking" for b in self.blocks.values()):
                self.shown.append("\n\n")  # as :meth:`reasoning` joins the blocks' text
            new.text.append(str(block.get("thinking") or ""))
            new.signature.append(str(block.get("signature") or ""))
            self.shown.append(new.text[0])
        elif new.kind == "redacted_thinking":
            new.data = str(block.get("data") or "")
        elif new.kind == "tool_use":
            new.id = str(block.get("id") or "")
            new.name = str(block.get("name") or "")
            new.input = _dict(block.get("input"))
        elif _provider_executed(new.kind):
            new.raw = dict(block)
        self.blocks[index] = new

    def _delta(self, index: int, delta: JSONObject) -> str:
        block = self.blocks.setdefault(index, _Block(kind="text"))
        if delta.get("type") == "text_delta":
            text = str(delta.get("text") or "")
            block.text.append(text)
            return text
        if delta.get("type") == "input_json_delta":
            block.json.append(str(delta.get("partial_json") or ""))
        elif delta.get("type") == "thinking_delta":
            thought = str(delta.get("thinking") or "")
            block.text.append(thought)
            self.shown.append(thought)
        elif delta.get("type") == "signature_delta":
            block.signature.append(str(delta.get("signature") or ""))
        return ""

    def _usage(self, usage: JSONObject) -> None:
        if "input_tokens" in usage:
            self.cache_write = _int(usage.get("cache_creation_input_tokens"))
            self.cache_read = _int(usage.get("cache_read_input_tokens"))
            self.input_tokens = _int(usage.get("input_tokens")) + self.cache_write + self.cache_read
        if "output_tokens" in usage:
            self.output_tokens = _int(usage.get("output_tokens"))

    def text(self) -> str:
        """The answer's text blocks, in order."""
        return "".join(
            "".join(self.blocks[i].text)
            for i in sorted(self.blocks)
            if self.blocks[i].kind == "text"
        )

    def reasoning(self) -> Reasoning | None:
        """The thinking, redacted-thinking and provider-executed tool blocks, in order and
        exactly as they came, to be sent back (None: the answer had none); ``providerCalls``
        lists the tools the provider ran, for the events."""
        blocks: list[JSONObject] = []
        shown: list[str] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.raw is not None:
                raw = dict(block.raw)
                if block.json:  # a server tool's input streamed as JSON text
                    raw["input"] = _parsed("".join(block.json))
                blocks.append(raw)
            elif block.kind == "thinking":
                thinking = "".join(block.text)
                shown.append(thinking)
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": thinking,
                        "signature": "".join(block.signature),
                    }
                )
            elif block.kind == "redacted_thinking":
                blocks.append({"type": "redacted_thinking", "data": block.data})
        if not blocks:
            return None
        redacted = any(b["type"] == "redacted_thinking" for b in blocks)
        record: Reasoning = {"format": "anthropic", "blocks": blocks, "text": "\n\n".join(shown),
                             "redacted": redacted}  # fmt: skip
        if calls := provider_calls(blocks):
            record["providerCalls"] = calls
        return record

    def tool_calls(self) -> list[ToolCall]:
        """The ``tool_use`` blocks, in order; broken input becomes an argument error."""
        calls: list[ToolCall] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.kind != "tool_use":
                continue
            # Input streams as JSON text; without deltas it is the object the block opened with.
            raw = "".join(block.json) or json.dumps(block.input)
            calls.append(make_tool_call(block.id or f"toolu_{index}", block.name, raw))
        return calls

    def usage(self) -> Usage | None:
        """Reported usage, or None when the stream carried none."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return Usage(
            input_tokens=self.input_tokens or 0,
            output_tokens=self.output_tokens or 0,
            cache_read_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
        )


def _provider_executed(kind: str) -> bool:
    """A block of a tool the provider runs itself (``server_tool_use``, and its result:
    ``web_search_tool_result``, ``code_execution_tool_result``, ...)."""
    return kind == "server_tool_use" or (kind.endswith("_tool_result") and kind != "tool_result")


def provider_calls(blocks: list[JSONObject]) -> list[ProviderCall]:
    """The provider-executed calls of an answer's blocks, each with its result:
    ``{"id", "name", "arguments", "output", "isError"}``."""
    results = {b.get("tool_use_id"): b for b in blocks if b.get("type") != "server_tool_use"}
    calls: list[ProviderCall] = []
    for block in blocks:
        if block.get("type") != "server_tool_use":
            continue
        result = results.get(block.get("id")) or {}
        content = result.get("content")
        failed = isinstance(content, dict) and str(content.get("type", "")).endswith("_error")
        calls.append({
            "id": str(block.get("id") or ""),
            "name": str(block.get("name") or ""),
            "arguments": block.get("input"),
            "output": json.dumps(content, ensure_ascii=False)[:2000] if content is not None else "",
            "isError": failed,
        })  # fmt: skip
    return calls


def _parsed(text: str) -> JSONValue:
    try:
        value: JSONValue = json.loads(text)
    except ValueError:
        return {}
    return value


def _dict(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def _int(value: JSONValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
