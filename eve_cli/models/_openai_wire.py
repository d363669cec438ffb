"""The Chat Completions wire format: neutral history → request body, stream chunks → answer.

Streamed tool calls are reassembled by ``index``, tolerant of what real OpenAI-compatible
servers send: ``arguments`` null, empty or whole in one chunk, ``id``/``name`` repeated in later
chunks, several calls sharing index 0 with distinct ids, and no usage chunk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, NotRequired, Required, TypedDict

from eve_cli._json import JSONObject, JSONValue
from eve_cli.models._base import Message, Reasoning, ToolCall, ToolSpec, Usage
from eve_cli.models._calls import history_arguments, is_json_object, make_tool_call
from eve_cli.models._shown import ShownReasoning
from eve_cli.models._structured import SchemaFormat

__all__ = ["Body", "ChunkReader", "ToolCallAssembler", "to_messages", "to_tools"]


class TextMessage(TypedDict):
    role: Literal["system", "user"]
    content: str


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text


class WireToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    tool_calls: NotRequired[list[WireToolCall]]


class ToolMessage(TypedDict):
    role: Literal["tool"]
    tool_call_id: str
    content: str


ChatMessage = TextMessage | AssistantMessage | ToolMessage


class FunctionDef(TypedDict):
    name: str
    description: str
    parameters: JSONObject


class ToolDef(TypedDict):
    type: Literal["function"]
    function: FunctionDef


class StreamOptions(TypedDict):
    include_usage: bool


class ResponseFormat(TypedDict, total=False):
    """``json_schema`` with its ``json_schema`` object, or the older ``json_object`` with a
    ``schema``."""

    type: Required[Literal["json_schema", "json_object"]]
    json_schema: SchemaFormat
    schema: JSONObject


class Body(TypedDict, total=False):
    """A Chat Completions request body."""

    model: Required[str]
    messages: Required[list[ChatMessage]]
    stream: Required[bool]
    stream_options: StreamOptions
    tools: list[ToolDef]
    max_tokens: int
    max_completion_tokens: int
    temperature: float
    top_p: float
    seed: int
    stop: list[str]
    parallel_tool_calls: bool
    reasoning_effort: str
    response_format: ResponseFormat


def to_messages(system: str, messages: list[Message]) -> list[ChatMessage]:
    """Chat Completions messages: the system prompt first, then the history."""
    out: list[ChatMessage] = []
    if system:
        out.append({"role": "system", "content": system})
    for position, message in enumerate(messages):
        role = message.get("role")
        if role in ("user", "system"):
            out.append({"role": role, "content": str(message.get("content") or "")})
        elif role == "assistant":
            out.append(_assistant(message))
        elif role == "tool":
            out.append(_tool_result(message))
        else:
            raise ValueError(f"history message {position} has unknown role {role!r}")
    return out


def _assistant(message: Message) -> AssistantMessage:
    text = str(message.get("content") or "")
    calls = message.get("tool_calls") or []
    wire: AssistantMessage = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        wire["tool_calls"] = [
            {
                "id": str(call.get("id", "")),
                "type": "function",
                "function": {
                    "name": str(call.get("name", "")),
                    "arguments": json.dumps(history_arguments(call), ensure_ascii=False),
                },
            }
            for call in calls
        ]
    return wire


def _tool_result(message: Message) -> ToolMessage:
    content = str(message.get("content") or "")
    # Chat Completions has no error flag on tool results: say it in the text.
    if message.get("is_error") and not content.lower().startswith("error"):
        content = f"Error: {content}"
    return {
        "role": "tool",
        "tool_call_id": str(message.get("tool_call_id", "")),
        "content": content,
    }


def to_tools(tools: list[ToolSpec]) -> list[ToolDef]:
    """``tools`` entries of the request body."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


@dataclass
class _Slot:
    index: int | None = None
    id: str = ""
    name: str = ""
    arguments: str = ""


class ToolCallAssembler:
    """Collects ``delta.tool_calls`` fragments; :meth:`finish` returns the calls in order."""

    def __init__(self) -> None:
        self._calls: list[_Slot] = []
        self._by_index: dict[int, _Slot] = {}

    def feed(self, fragment: JSONValue) -> None:
        """Add one fragment (one element of ``delta.tool_calls``)."""
        if not isinstance(fragment, dict):
            return
        call_id = _text(fragment.get("id"))
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        name = _text(function.get("name"))
        raw = function.get("arguments")
        # Some servers send arguments as an object rather than a JSON string.
        args = json.dumps(raw) if isinstance(raw, dict | list) else _text(raw)
        slot = self._slot(fragment.get("index"), call_id, name, args)
        if call_id and not slot.id:
            slot.id = call_id
        if name and not slot.name:
            slot.name = name
        elif name and name != slot.name and not slot.arguments:
            slot.name += name  # a differing name before any arguments continues the name
        if args and not (args == slot.arguments and is_json_object(args)):
            slot.arguments += args

    def _slot(self, index: JSONValue, call_id: str, name: str, args: str) -> _Slot:
        """The call a fragment at ``index`` continues, or a new one it starts."""
        at = index if isinstance(index, int) and not isinstance(index, bool) else None
        if at is not None:
            slot = self._by_index.get(at)
        else:
            slot = self._calls[-1] if self._calls else None
        if slot is None or _starts_new_call(slot, call_id, name, args):
            slot = _Slot(at)
            self._calls.append(slot)
            if at is not None:
                self._by_index[at] = slot
        return slot

    def finish(self) -> list[ToolCall]:
        """The reassembled calls in index order (calls sharing an index in arrival order);
        missing ids are filled in, bad arguments reported per call."""
        last = max((slot.index or 0 for slot in self._calls), default=0)
        slots = sorted(self._calls, key=lambda slot: last if slot.index is None else slot.index)
        return [
            make_tool_call(slot.id or f"call_{number}", slot.name, slot.arguments)
            for number, slot in enumerate(slots)
        ]


def _starts_new_call(slot: _Slot, call_id: str, name: str, args: str) -> bool:
    if call_id and slot.id:
        return call_id != slot.id
    if not is_json_object(slot.arguments):
        return False
    # The slot holds a finished call: a new name, or new arguments opening an object, start
    # another call on the same index (servers that put every call at index 0 without ids).
    if name and slot.name and name != slot.name:
        return True
    return bool((name or call_id) and args.lstrip().startswith("{") and args != slot.arguments)


def _text(value: JSONValue) -> str:
    return value if isinstance(value, str) else ""


@dataclass
class ChunkReader(ShownReasoning):
    """Folds ``chat.completion.chunk`` objects into text, tool calls, usage and finish reason."""

    text: list[str] = field(default_factory=list)
    thought: list[str] = field(default_factory=list)  # reasoning_content (vLLM, DeepSeek, ...)
    calls: ToolCallAssembler = field(default_factory=ToolCallAssembler)
    usage: Usage | None = None
    finish_reason: str | None = None

    def feed(self, chunk: JSONObject) -> str:
        """Take one chunk; returns its text delta (possibly empty)."""
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return ""
        delta_text = "".join(
            self._choice(choice)
            for choice in choices
            if isinstance(choice, dict) and choice.get("index", 0) == 0
        )
        if delta_text:
            self.text.append(delta_text)
        return delta_text

    def _choice(self, choice: JSONObject) -> str:
        """Take the first choice of a chunk; returns its text."""
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        # "delta" when streaming; "message" when a server answers with a whole completion.
        whole = "delta" not in choice
        delta = choice.get("delta") or choice.get("message") or {}
        if not isinstance(delta, dict):
            return ""
        for key in ("reasoning_content", "reasoning"):  # servers use either name
            thought = delta.get(key)
            if isinstance(thought, str) and thought:
                self.thought.append(thought)
                self.shown.append(thought)
                break
        fragments = delta.get("tool_calls")
        for position, fragment in enumerate(fragments if isinstance(fragments, list) else ()):
            if whole and isinstance(fragment, dict):
                fragment = {"index": position, **fragment}
            self.calls.feed(fragment)
        content = delta.get("content")
        return content if isinstance(content, str) else ""

    def reasoning(self) -> Reasoning | None:
        """What the server showed of the model's reasoning, kept (never sent back)."""
        return {"format": "text", "text": "".join(self.thought)} if self.thought else None


def _usage(raw: JSONObject) -> Usage:
    def number(key: str, inside: JSONObject = raw) -> int:
        value = inside.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    prompt, completion = raw.get("prompt_tokens_details"), raw.get("completion_tokens_details")
    return Usage(
        input_tokens=number("prompt_tokens"),
        output_tokens=number("completion_tokens"),
        cache_read_tokens=number("cached_tokens", prompt if isinstance(prompt, dict) else {}),
        reasoning_tokens=number(
            "reasoning_tokens", completion if isinstance(completion, dict) else {}
        ),
    )
