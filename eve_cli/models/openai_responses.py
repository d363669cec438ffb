"""``openai-responses:MODEL``: the OpenAI Responses API, streamed and stateless.

Requests carry ``store: false`` and ask for ``reasoning.encrypted_content``: a reasoning
model's reasoning items come back encrypted, are kept in eve's history (so they survive a
crash like everything else) and are sent back with the next request, ids and all. Settings as
for ``openai:``: ``OPENAI_BASE_URL`` (``/responses`` is appended) and ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from eve_cli.models._base import ModelRequest, ModelResponse
from eve_cli.models._http import DeltaRelay, one_line
from eve_cli.models._provider import HTTPModel
from eve_cli.models._responses_wire import Body, ResponseReader, to_input, to_tools
from eve_cli.models._sse import SSEEvent
from eve_cli.models._structured import json_schema_format
from eve_cli.models._tokens import estimate_usage

__all__ = ["OpenAIResponsesModel"]


class OpenAIResponsesModel(HTTPModel[Body]):
    """A Responses API model, streamed, ``store: false``."""

    provider = "openai-responses"
    key_var = "OPENAI_API_KEY"
    base_var = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    def _endpoint(self, request: ModelRequest) -> tuple[str, Body]:
        try:
            items = to_input(request.messages)
        except ValueError as exc:
            raise self._fail(str(exc)) from None
        body: Body = {
            "model": self.model,
            "input": items,
            "stream": True,
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if request.system:
            body["instructions"] = request.system
        if request.tools or request.provider_tools:
            body["tools"] = [*to_tools(request.tools), *request.provider_tools]
        self._put_settings(body, request)
        return self._url("/responses"), body

    def _put_settings(self, out: Body, request: ModelRequest) -> None:
        """The model settings, into the body under the Responses API's names."""
        given = self.settings
        if (max_tokens := request.max_tokens or given.max_tokens) is not None:
            out["max_output_tokens"] = max_tokens
        if given.temperature is not None:
            out["temperature"] = given.temperature
        if given.top_p is not None:
            out["top_p"] = given.top_p
        if given.parallel_tool_calls is not None and request.tools:
            out["parallel_tool_calls"] = given.parallel_tool_calls
        if (effort := given.effort()) is not None:
            out["reasoning"] = {"effort": effort, "summary": "auto"}
        if request.output_schema is not None:
            out["text"] = {
                "format": {"type": "json_schema", **json_schema_format(request.output_schema)}
            }

    async def _read(
        self, events: AsyncIterator[SSEEvent], request: ModelRequest, relay: DeltaRelay
    ) -> ModelResponse:
        reader = ResponseReader()
        async for event in events:
            if event.data.strip() == "[DONE]":
                break
            try:
                data = json.loads(event.data)
            except ValueError:
                raise self._fail(
                    f"unreadable stream data: {one_line(event.data, limit=80)}"
                ) from None
            if not isinstance(data, dict):
                continue
            data.setdefault("type", event.event)
            text = reader.feed(data)
            await relay.reasoning(reader.take_shown())  # shown before the text
            await relay(text)
            if reader.done:
                break
        if reader.error is not None:
            raise self._fail(f"error in stream: {reader.error}", retryable=reader.status is None)
        if not reader.done:
            raise self._fail("the stream ended before the answer was complete", retryable=True)
        calls = reader.tool_calls()
        text = reader.answer_text()
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=reader.usage or estimate_usage(request, text, calls),
            stop_reason=reader.status,
            reasoning=reader.reasoning(),
        )
