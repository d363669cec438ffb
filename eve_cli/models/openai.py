"""``openai:MODEL``: OpenAI-compatible Chat Completions (OpenAI, Ollama, vLLM, llama.cpp).

Settings: ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``; the path
``/chat/completions`` is appended) and ``OPENAI_API_KEY`` (required only for the public
endpoint), read from the environment or ``.env`` / ``.env.local``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping

from eve_cli._json import JSONObject, JSONValue
from eve_cli.models._base import ModelRequest, ModelResponse
from eve_cli.models._http import WHOLE_BODY, CallError, DeltaRelay, error_details, one_line
from eve_cli.models._openai_wire import Body, ChunkReader, ResponseFormat, to_messages, to_tools
from eve_cli.models._provider import HTTPModel
from eve_cli.models._sse import SSEEvent
from eve_cli.models._structured import json_schema_format
from eve_cli.models._tokens import estimate_usage

__all__ = ["OpenAIModel"]

# Mid-stream error types that will fail the same way again.
_FINAL_ERRORS = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "insufficient_quota",
        "context_length_exceeded",
    }
)


class OpenAIModel(HTTPModel[Body]):
    """A Chat Completions model, streamed."""

    provider = "openai"
    key_var = "OPENAI_API_KEY"
    base_var = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"

    def _configure(self, settings: Mapping[str, str]) -> None:
        # Some servers reject ``stream_options``; dropped for good after such a refusal.
        self._stream_options = True
        # Some servers know only the older ``json_object`` form with a ``schema`` (llama.cpp's
        # Python server, several hosted ones): taken for good after such a refusal.
        self._schema_object = False

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    def _endpoint(self, request: ModelRequest) -> tuple[str, Body]:
        try:
            messages = to_messages(request.system, request.messages)
        except ValueError as exc:
            raise self._fail(str(exc)) from None
        body: Body = {"model": self.model, "messages": messages, "stream": True}
        if self._stream_options:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = to_tools(request.tools)
        self._put_settings(body, request)
        return self._url("/chat/completions"), body

    def _put_settings(self, out: Body, request: ModelRequest) -> None:
        """The model settings, into the body under Chat Completions' names."""
        given = self.settings
        max_tokens = request.max_tokens or given.max_tokens
        # The public API wants the newer name; compatible servers know the older one.
        if max_tokens is not None and self._is_public_endpoint:
            out["max_completion_tokens"] = max_tokens
        elif max_tokens is not None:
            out["max_tokens"] = max_tokens
        if given.temperature is not None:
            out["temperature"] = given.temperature
        if given.top_p is not None:
            out["top_p"] = given.top_p
        if given.seed is not None:
            out["seed"] = given.seed
        if given.stop:
            out["stop"] = list(given.stop)
        if given.parallel_tool_calls is not None and request.tools:
            out["parallel_tool_calls"] = given.parallel_tool_calls
        if (effort := given.effort()) is not None:
            out["reasoning_effort"] = effort
        if request.output_schema is not None:
            out["response_format"] = self._response_format(request.output_schema)

    def _response_format(self, schema: JSONObject) -> ResponseFormat:
        if self._schema_object:
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": json_schema_format(schema)}

    async def _read(
        self, events: AsyncIterator[SSEEvent], request: ModelRequest, relay: DeltaRelay
    ) -> ModelResponse:
        reader = ChunkReader()
        done = False
        try:
            async for event in events:
                if event.data.strip() == "[DONE]":
                    done = True
                    break
                chunk = self._decode(event.data)
                if event.event == WHOLE_BODY:
                    done = True
                text = reader.feed(chunk)
                await relay.reasoning(reader.take_shown())  # shown before the text
                await relay(text)
        except CallError as err:
            if err.status == 400 and self._stream_options and "stream_options" in err.message:
                self._stream_options = False
                raise CallError(
                    self.name, err.message, status=400, retryable=True, retry_after=0
                ) from None
            if self._refused_json_schema(err, request):
                self._schema_object = True
                raise CallError(
                    self.name, err.message, status=err.status, retryable=True, retry_after=0
                ) from None
            raise
        if not done and reader.finish_reason is None:
            raise self._fail("the stream ended before the answer was complete", retryable=True)
        calls = reader.calls.finish()
        text = "".join(reader.text)
        usage = reader.usage or estimate_usage(request, text, calls)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=usage,
            stop_reason=reader.finish_reason,
            reasoning=reader.reasoning(),
        )

    def _refused_json_schema(self, err: CallError, request: ModelRequest) -> bool:
        """The server refused ``response_format``'s ``json_schema`` type, naming the
        ``json_object`` form it takes instead (a 400, 422, or a 500 from a server that
        validates the body late)."""
        return (
            request.output_schema is not None
            and not self._schema_object
            and err.status in (400, 422, 500)
            and "json_object" in err.message
            and ("json_schema" in err.message or "response_format" in err.message)
        )

    def _decode(self, data: str) -> JSONObject:
        try:
            chunk: JSONValue = json.loads(data)
        except ValueError:
            raise self._fail(f"unreadable stream data: {one_line(data, limit=80)}") from None
        if not isinstance(chunk, dict):
            raise self._fail(f"unexpected stream data: {one_line(data, limit=80)}")
        if chunk.get("error"):
            message, code = error_details(data)
            error = chunk["error"]
            kind = str(error.get("type") or "") if isinstance(error, dict) else ""
            status = error.get("code") if isinstance(error, dict) else None
            retryable = kind not in _FINAL_ERRORS and code not in _FINAL_ERRORS
            raise self._fail(
                f"error in stream: {message}",
                retryable=retryable,
                status=status if isinstance(status, int) else None,
            )
        return chunk
