"""``anthropic:MODEL``: the Anthropic Messages API, streamed.

Settings: ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``; ``/v1/messages`` is
appended), ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``; required for the public endpoint) and
``ANTHROPIC_VERSION`` (the ``anthropic-version`` header, default ``2023-06-01``), read from the
environment or ``.env`` / ``.env.local``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace

from eve_cli._json import JSONObject
from eve_cli.models._anthropic_wire import (
    ERROR_STATUS,
    Body,
    EventReader,
    StreamError,
    ToolDef,
    mark_cache,
    to_messages,
    to_tools,
)
from eve_cli.models._base import ModelRequest, ModelResponse
from eve_cli.models._http import DeltaRelay, one_line
from eve_cli.models._provider import HTTPModel
from eve_cli.models._sse import SSEEvent
from eve_cli.models._structured import FINAL_TOOL
from eve_cli.models._tokens import estimate_text, estimate_usage
from eve_cli.models._windows import max_output_tokens_for

__all__ = ["DEFAULT_API_VERSION", "AnthropicModel"]

DEFAULT_API_VERSION = "2023-06-01"
_RETRYABLE_ERRORS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


def _force_final_tool(body: Body, schema: JSONObject) -> None:
    """The output schema as a ``final_result`` tool the model must answer through (any tool
    may come first; with thinking on, which forbids forced tool use, it is asked for)."""
    final: ToolDef = {
        "name": FINAL_TOOL,
        "description": "Give your final answer: call this once you are done, with the answer.",
        "input_schema": schema,
    }
    body["tools"] = [*body.get("tools", []), final]
    if "thinking" not in body:
        choice = body.get("tool_choice") or {}
        body["tool_choice"] = {**choice, "type": "any"}


class AnthropicModel(HTTPModel[Body]):
    """A Messages API model, streamed."""

    provider = "anthropic"
    key_var = "ANTHROPIC_API_KEY"
    base_var = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"

    def _configure(self, settings: Mapping[str, str]) -> None:
        self.api_version = (settings.get("ANTHROPIC_VERSION") or "").strip() or DEFAULT_API_VERSION

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        headers["anthropic-version"] = self.api_version
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def _endpoint(self, request: ModelRequest) -> tuple[str, Body]:
        try:
            system, messages = to_messages(request.system, request.messages)
        except ValueError as exc:
            raise self._fail(str(exc)) from None
        body: Body = {"model": self.model, "messages": messages, "stream": True}
        if system:
            body["system"] = system
        if request.tools or request.provider_tools:
            body["tools"] = [*to_tools(request.tools), *request.provider_tools]
        self._put_settings(body, request)
        if request.output_schema is not None and request.purpose == "turn":
            _force_final_tool(body, request.output_schema)
        if self.settings.prompt_cache is not False:
            mark_cache(body)
        return self._url("/v1/messages"), body

    def _put_settings(self, out: Body, request: ModelRequest) -> None:
        """The model settings, into the body under the Messages API's names (``max_tokens``
        is required; thinking, asked for by ``reasoning``, needs it above its budget)."""
        given = self.settings
        budget = given.thinking_budget() if request.purpose == "turn" else None
        max_tokens = request.max_tokens or given.max_tokens or max_output_tokens_for(self.model)
        if budget is not None:
            out["thinking"] = {"type": "enabled", "budget_tokens": budget}
            if max_tokens <= budget:
                max_tokens += budget
        out["max_tokens"] = max_tokens
        if budget is None and given.temperature is not None:
            out["temperature"] = given.temperature
        if budget is None and given.top_p is not None:
            out["top_p"] = given.top_p
        if given.stop:
            out["stop_sequences"] = list(given.stop)
        if given.parallel_tool_calls is False and request.tools:
            out["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}

    async def _stream(self, events: AsyncIterator[SSEEvent], relay: DeltaRelay) -> EventReader:
        """Read one attempt's events to the answer's end, relaying what streams."""
        reader = EventReader()
        async for event in events:
            try:
                data = json.loads(event.data)
            except ValueError:
                raise self._fail(
                    f"unreadable stream data: {one_line(event.data, limit=80)}"
                ) from None
            if not isinstance(data, dict):
                continue
            data.setdefault("type", event.event)
            try:
                text = reader.feed(data)
                await relay.reasoning(reader.take_shown())  # shown before the text
                await relay(text)
            except StreamError as err:
                raise self._fail(
                    f"{err.kind}: {err.message}" if err.message else err.kind,
                    retryable=err.kind in _RETRYABLE_ERRORS,
                    status=ERROR_STATUS.get(err.kind),
                ) from None
            if reader.stopped:
                break
        if not reader.stopped and reader.stop_reason is None:
            raise self._fail("the stream ended before the answer was complete", retryable=True)
        return reader

    async def _read(
        self, events: AsyncIterator[SSEEvent], request: ModelRequest, relay: DeltaRelay
    ) -> ModelResponse:
        reader = await self._stream(events, relay)
        calls = reader.tool_calls()
        text = reader.text()
        final = [c for c in calls if c.name == FINAL_TOOL and c.arguments is not None]
        if final and request.output_schema is not None:  # the answer, given as the tool's input
            text, calls = json.dumps(final[0].arguments, ensure_ascii=False), []
        usage = reader.usage() or estimate_usage(request, text, calls)
        reasoning = reader.reasoning()
        if reasoning is not None and reasoning["text"]:
            # Thinking is billed as output; the API does not count it apart: estimated.
            usage = replace(usage, reasoning_tokens=estimate_text(reasoning["text"]))
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=usage,
            stop_reason=reader.stop_reason,
            reasoning=reasoning,
        )
