"""``anthropic:MODEL`` against a real scripted Messages API server on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

from eve_cli.models import ModelRequest, ToolSpec
from eve_cli.models._http import RetryPolicy
from eve_cli.models.anthropic import AnthropicModel
from tests.eve_cli.models.scriptserver import (
    STALL,
    Reply,
    ScriptServer,
    Sleeps,
    failure,
    generate,
    sse,
)

KEY = "sk-ant-test-0123456789abcdef"
TOOLS = [ToolSpec("read", "Read a file", {"type": "object", "properties": {"path": {}}})]
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "read a and b"},
    {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            {"id": "t1", "name": "read", "arguments": {"path": "a"}},
            {"id": "t2", "name": "read", "arguments": {"path": "b"}},
        ],
    },
    {"role": "tool", "tool_call_id": "t1", "name": "read", "content": "A!", "is_error": False},
    {"role": "tool", "tool_call_id": "t2", "name": "read", "content": "missing", "is_error": True},
    {"role": "user", "content": "and now?"},
    {"role": "user", "content": "quickly"},
]
REQUEST = ModelRequest(system="be brief", messages=HISTORY, tools=TOOLS)


def model_for(server: ScriptServer, policy: RetryPolicy, **env: str) -> AnthropicModel:
    settings = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": KEY, **env}
    return AnthropicModel("claude-3-5-sonnet-latest", env=settings, retry=policy)


def ev(kind: str, **data: Any) -> bytes:
    return sse({"type": kind, **data}, event=kind)


START = ev("message_start", message={"id": "m", "usage": {"input_tokens": 40, "output_tokens": 1}})
STOP = ev("message_stop")


def text_block(index: int, *parts: str) -> list[bytes]:
    out = [ev("content_block_start", index=index, content_block={"type": "text", "text": ""})]
    for part in parts:
        delta = {"type": "text_delta", "text": part}
        out.append(ev("content_block_delta", index=index, delta=delta))
    return [*out, ev("content_block_stop", index=index)]


def tool_block(index: int, tool_id: str, name: str, *parts: str) -> list[bytes]:
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
    out = [ev("content_block_start", index=index, content_block=block)]
    for part in parts:
        delta = {"type": "input_json_delta", "partial_json": part}
        out.append(ev("content_block_delta", index=index, delta=delta))
    return [*out, ev("content_block_stop", index=index)]


def end(stop_reason: str, output_tokens: int = 12) -> list[bytes]:
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    return [ev("message_delta", delta=delta, usage={"output_tokens": output_tokens}), STOP]


def test_text_and_tool_use_stream_and_the_request_alternates_roles(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    chunks: list[bytes | float | str] = [
        START,
        ev("ping"),
        *text_block(0, "Let me ", "look."),
        ev("some_future_event", detail="ignored"),
        *tool_block(1, "toolu_1", "read", "", '{"pa', 'th": ', '"c"}'),
        *tool_block(2, "toolu_2", "list"),
        *end("tool_use"),
    ]
    server.add(Reply(chunks=chunks))
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert (response.text, deltas) == ("Let me look.", ["Let me ", "look."])
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("toolu_1", "read", {"path": "c"}),
        ("toolu_2", "list", {}),
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40, 12)
    assert response.stop_reason == "tool_use" and not response.usage.estimated
    assert len(server.requests) == 1
    seen = server.requests[0]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    body = seen.body
    cache = {"cache_control": {"type": "ephemeral"}}  # prompt-cache breakpoints
    assert (body["model"], body["system"], body["stream"]) == (
        "claude-3-5-sonnet-latest",
        [{"type": "text", "text": "be brief", **cache}],
        True,
    )
    assert body["max_tokens"] == 8192
    assert body["tools"] == [
        {"name": "read", "description": "Read a file", "input_schema": TOOLS[0].parameters, **cache}
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "read a and b", **cache}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "t2", "name": "read", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "is_error": False, "content": "A!"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "is_error": True,
                    "content": "missing",
                },
                {"type": "text", "text": "and now?"},
                {"type": "text", "text": "quickly", **cache},
            ],
        },
    ]


def test_version_header_and_max_tokens_are_configurable(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(Reply(chunks=[START, *text_block(0, "ok"), *end("end_turn")]))
    model = model_for(server, policy, ANTHROPIC_VERSION="2099-01-01")
    request = ModelRequest(
        system="", messages=[{"role": "assistant", "content": "hi"}], max_tokens=5
    )
    generate(model, request)

    seen = server.requests[0]
    assert seen.headers["anthropic-version"] == "2099-01-01"
    assert seen.body["max_tokens"] == 5 and "system" not in seen.body
    # The API wants a user turn first.
    assert [m["role"] for m in seen.body["messages"]] == ["user", "assistant"]


def test_overloaded_529_then_success(
    server: ScriptServer, policy: RetryPolicy, sleeps: Sleeps
) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.add(
        Reply(529, body=json.dumps(overloaded).encode()),
        Reply(chunks=[START, *text_block(0, "fine"), *end("end_turn")]),
    )
    response, _ = generate(model_for(server, policy), REQUEST)

    assert response.text == "fine"
    assert len(server.requests) == 2 and len(sleeps.delays) == 1


def test_overloaded_error_event_mid_stream_is_retried_once_per_delta(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    error = ev("error", error={"type": "overloaded_error", "message": "Overloaded"})
    server.add(
        Reply(chunks=[START, *text_block(0, "Hal")[:2], error]),
        Reply(chunks=[START, *text_block(0, "Hal", "lo"), *end("end_turn")]),
    )
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert (response.text, deltas) == ("Hallo", ["Hal", "lo"])
    assert len(server.requests) == 2


def test_overloaded_until_retries_run_out(server: ScriptServer, policy: RetryPolicy) -> None:
    error = ev("error", error={"type": "overloaded_error", "message": "Overloaded"})
    server.add(*[Reply(chunks=[START, error]) for _ in range(4)])
    err = failure(model_for(server, policy), REQUEST)

    assert str(err) == (
        "anthropic:claude-3-5-sonnet-latest (HTTP 529): overloaded_error: Overloaded "
        "(gave up after 4 attempts)"
    )
    assert len(server.requests) == 4


def test_invalid_request_error_event_is_final(server: ScriptServer, policy: RetryPolicy) -> None:
    error = ev("error", error={"type": "invalid_request_error", "message": "bad"})
    server.add(Reply(chunks=[START, error]))
    err = failure(model_for(server, policy), REQUEST)

    assert (err.status, err.retryable, len(server.requests)) == (400, False, 1)


def test_truncated_tool_input_becomes_an_argument_error(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(
        Reply(
            chunks=[START, *tool_block(0, "toolu_9", "write", '{"text": "ab'), *end("max_tokens")]
        )
    )
    response, _ = generate(model_for(server, policy), REQUEST)

    (call,) = response.tool_calls
    assert (call.id, call.arguments, call.raw_arguments) == ("toolu_9", None, '{"text": "ab')
    assert call.argument_error is not None and response.stop_reason == "max_tokens"


def test_inter_chunk_stall_is_retried(server: ScriptServer, policy: RetryPolicy) -> None:
    server.add(
        Reply(chunks=[START, STALL]),
        Reply(chunks=[START, *text_block(0, "ok"), *end("end_turn")]),
    )
    response, _ = generate(model_for(server, policy), REQUEST)

    assert response.text == "ok" and len(server.requests) == 2


def test_stream_without_usage_is_estimated(server: ScriptServer, policy: RetryPolicy) -> None:
    bare_start = ev("message_start", message={"id": "m"})
    delta = ev("message_delta", delta={"stop_reason": "end_turn"})
    server.add(Reply(chunks=[bare_start, *text_block(0, "hello there"), delta]))
    response, _ = generate(model_for(server, policy), REQUEST)

    # No message_stop either: a stop reason is enough to call the answer complete.
    assert response.text == "hello there"
    assert response.usage.estimated and response.usage.output_tokens == 3


def test_unauthorized_is_not_retried_and_never_shows_the_key(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    body = {"type": "error", "error": {"type": "authentication_error", "message": f"bad key {KEY}"}}
    server.add(Reply(401, body=json.dumps(body).encode()))
    model = model_for(server, policy)
    err = failure(model, REQUEST)

    assert str(err) == (
        "anthropic:claude-3-5-sonnet-latest (HTTP 401): bad key *** (check ANTHROPIC_API_KEY)"
    )
    assert len(server.requests) == 1
    for text in (str(err), repr(err), repr(model)):
        assert KEY not in text


def test_missing_key_for_the_public_endpoint_names_the_variable() -> None:
    err = failure(AnthropicModel("claude-sonnet-4-5", env={}), REQUEST)

    assert "set ANTHROPIC_API_KEY" in str(err)
