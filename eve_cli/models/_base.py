"""The provider interface: what every model (demo, scripted, openai, anthropic) implements.

History crossing this boundary is provider-neutral and plain data (it is persisted in journals):

* ``{"role": "user", "content": str}``
* ``{"role": "assistant", "content": str, "tool_calls": [ToolCallDict, ...][, "reasoning":
  Reasoning]}``
* ``{"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}``

where ``ToolCallDict`` is ``{"id": str, "name": str, "arguments": dict}``. The system prompt
travels separately in :class:`ModelRequest`. Providers translate to and from their wire format.

``Reasoning`` is what a model kept of its reasoning, byte-exact, for the provider that made it:
``{"format": "anthropic", "blocks": [thinking / redacted_thinking blocks], "text": str}``,
``{"format": "openai-responses", "items": [the answer's output items], "text": str}`` or
``{"format": "text", "text": str}`` (``reasoning_content`` of compatible servers, shown and
kept, not sent back). ``text`` is what may be shown of it. A provider sends back only its own
format; another provider ignores it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

from eve_cli._json import JSONObject, JSONValue

Message = dict[str, Any]
DeltaCallback = Callable[[str], Awaitable[None]]


class ProviderCall(TypedDict):
    """A tool the provider ran itself (a web search, code execution), as the events show it."""

    id: str
    name: str
    arguments: JSONValue
    output: str
    isError: bool


class Reasoning(TypedDict):
    """What a model kept of its reasoning (see the module docstring): ``blocks`` for the
    ``anthropic`` format, ``items`` for ``openai-responses``, as the provider sent them."""

    format: str
    text: str
    blocks: NotRequired[list[JSONObject]]
    items: NotRequired[list[JSONObject]]
    redacted: NotRequired[bool]
    providerCalls: NotRequired[list[ProviderCall]]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: JSONObject


@dataclass(frozen=True)
class ModelRequest:
    """One model call.

    ``call_index`` counts the session's earlier real model calls from its durable history, so a
    re-run of an interrupted call carries the same index (the scripted model relies on it).
    ``purpose`` is ``"summary"`` for a compaction summary, which does not count as a call.
    ``messages_tokens``, when the caller knows it, is the sum of the token estimates of
    ``messages`` (``models._tokens.message_tokens``): a model that estimates its usage uses it
    instead of walking the history again.
    """

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    call_index: int = 0
    purpose: Literal["turn", "summary"] = "turn"
    max_tokens: int | None = None
    session_id: str | None = None
    messages_tokens: int | None = None
    output_schema: JSONObject | None = None  # the final answer's JSON schema
    provider_tools: list[JSONObject] = field(default_factory=list)  # run by the provider


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for.

    ``arguments`` is None when the model's arguments could not be parsed (e.g. truncated JSON);
    ``argument_error`` then says why and ``raw_arguments`` holds what arrived, so the harness can
    answer with a tool-error result the model can correct.
    """

    id: str
    name: str
    arguments: JSONObject | None
    raw_arguments: str | None = None
    argument_error: str | None = None


@dataclass(frozen=True)
class Usage:
    """Token usage of one call; ``estimated`` when the provider reported none.

    ``input_tokens`` counts every input token, those read from and written to the provider's
    prompt cache included (``cache_read_tokens``, ``cache_write_tokens`` are parts of it);
    ``reasoning_tokens`` are part of ``output_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def as_record(self) -> dict[str, int]:
        """The journaled form: ``input`` and ``output``, then the parts that are not zero."""
        record = {"input": self.input_tokens, "output": self.output_tokens}
        for key, value in (
            ("cacheRead", self.cache_read_tokens),
            ("cacheWrite", self.cache_write_tokens),
            ("reasoning", self.reasoning_tokens),
        ):
            if value:
                record[key] = value
        return record


@dataclass(frozen=True)
class ModelResponse:
    """The complete answer of one model call."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    reasoning: Reasoning | None = None  # see the module docstring


class ModelError(Exception):
    """A model call failed. ``str()`` is one clear line naming provider, status and message."""

    def __init__(
        self, provider: str, message: str, *, status: int | None = None, retryable: bool = False
    ) -> None:
        self.provider = provider
        self.status = status
        self.message = message
        self.retryable = retryable
        where = f"{provider} (HTTP {status})" if status is not None else provider
        super().__init__(f"{where}: {message}")


class UnknownModelError(ValueError):
    """A model string names no known provider or is malformed."""


class Model(ABC):
    """A model provider bound to one model string (``demo``, ``openai:gpt-4o``, ...)."""

    #: The model string this instance was resolved from.
    name: str
    #: Context window in tokens, used by compaction.
    context_window: int

    @abstractmethod
    async def generate(
        self,
        request: ModelRequest,
        on_delta: DeltaCallback | None = None,
        on_reasoning: DeltaCallback | None = None,
    ) -> ModelResponse:
        """Run one call, forwarding text deltas to ``on_delta`` as they arrive, and what may
        be shown of the model's reasoning to ``on_reasoning`` (the response's ``reasoning``
        stays authoritative: a provider may show less while streaming).

        Raises:
            ModelError: the provider failed after its retries; the message is user-facing.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most providers hold nothing
        """Release connections held by the provider."""
