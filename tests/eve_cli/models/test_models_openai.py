"""``openai:MODEL`` against a real scripted Chat Completions server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from eve_cli.models import ModelRequest, ToolSpec, resolve_model
from eve_cli.models._http import RetryPolicy
from eve_cli.models.openai import OpenAIModel
from tests.eve_cli.models.scriptserver import (
    STALL,
    Reply,
    ScriptServer,
    Sleeps,
    failure,
    generate,
    sse,
)

KEY = "sk-test-9f8e7d6c5b4a39281706"
TOOLS = [ToolSpec("read", "Read a file", {"type": "object", "properties": {"path": {}}})]
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "look at a.txt"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "read", "arguments": {"path": "a.txt"}}],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "read",
        "content": "no such file",
        "is_error": True,
    },
    {"role": "user", "content": "try b.txt"},
]


def model_for(server: ScriptServer, policy: RetryPolicy, **env: str) -> OpenAIModel:
    settings = {"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": KEY, **env}
    return OpenAIModel("gpt-4o", env=settings, retry=policy)


def chunk(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
) -> bytes:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return sse({"id": "x", "object": "chat.completion.chunk", "choices": [choice]})


def frag(
    index: int, call_id: str | None = None, name: str | None = None, args: Any = ""
) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": args}
    if name is not None:
        function["name"] = name
    out: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        out["id"] = call_id
        out["type"] = "function"
    return out


USAGE = sse({"choices": [], "usage": {"prompt_tokens": 31, "completion_tokens": 7}})
DONE = b"data: [DONE]\n\n"
REQUEST = ModelRequest(system="be brief", messages=HISTORY, tools=TOOLS)


def test_text_streams_as_deltas_and_the_request_is_chat_completions(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(Reply(chunks=[chunk("Hel"), chunk("lo"), chunk(finish="stop"), USAGE, DONE]))
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert (response.text, deltas, response.stop_reason) == ("Hello", ["Hel", "lo"], "stop")
    assert (response.usage.input_tokens, response.usage.output_tokens) == (31, 7)
    assert not response.usage.estimated
    assert len(server.requests) == 1
    seen = server.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    body = seen.body
    assert body["model"] == "gpt-4o"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "look at a.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Error: no such file"},
        {"role": "user", "content": "try b.txt"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read",
                "description": "Read a file",
                "parameters": TOOLS[0].parameters,
            },
        }
    ]
    assert "max_tokens" not in body and "tool_choice" not in body


def test_fragmented_calls_with_null_arguments_and_repeated_ids_reassemble(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    # Two calls interleaved by index; the first chunk of each has arguments null; later chunks
    # repeat id and name; no usage chunk at all.
    server.add(
        Reply(
            chunks=[
                chunk("Reading both."),
                chunk(tool_calls=[frag(0, "call_a", "read", None)]),
                chunk(tool_calls=[frag(1, "call_b", "read", None)]),
                chunk(tool_calls=[frag(0, args='{"pa')]),
                chunk(tool_calls=[frag(1, "call_b", "read", '{"path"')]),
                chunk(tool_calls=[frag(0, "call_a", "read", 'th": "a.txt"}')]),
                chunk(tool_calls=[frag(1, args=': "b.txt"}')]),
                chunk(finish="tool_calls"),
                DONE,
            ]
        )
    )
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_a", "read", {"path": "a.txt"}),
        ("call_b", "read", {"path": "b.txt"}),
    ]
    assert deltas == ["Reading both."]
    assert response.stop_reason == "tool_calls"
    assert response.usage.estimated and response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0
    assert len(server.requests) == 1


def test_whole_call_in_one_chunk_and_empty_arguments(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(
        Reply(
            chunks=[
                chunk(tool_calls=[frag(0, "c1", "read", '{"path": "x"}')]),
                # The same whole arguments sent again, as some servers do, must not double.
                chunk(tool_calls=[frag(0, "c1", "read", '{"path": "x"}')]),
                chunk(tool_calls=[frag(1, "c2", "list", "")]),
                chunk(finish="tool_calls"),
                DONE,
            ]
        )
    )
    response, _ = generate(model_for(server, policy), REQUEST)

    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("c1", "read", {"path": "x"}),
        ("c2", "list", {}),
    ]
    assert response.text == ""


def test_calls_sharing_index_zero_are_told_apart(server: ScriptServer, policy: RetryPolicy) -> None:
    server.add(
        Reply(
            chunks=[
                chunk(tool_calls=[frag(0, "c1", "read", '{"path":')]),
                chunk(tool_calls=[frag(0, args=' "a"}')]),
                chunk(tool_calls=[frag(0, "c2", "read", '{"path": "b"}')]),
                # No ids at all: a new name after a finished call starts another call.
                chunk(tool_calls=[frag(0, name="list", args='{"dir": "."}')]),
                chunk(finish="tool_calls"),
                DONE,
            ]
        )
    )
    response, _ = generate(model_for(server, policy), REQUEST)

    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("c1", "read", {"path": "a"}),
        ("c2", "read", {"path": "b"}),
        ("call_2", "list", {"dir": "."}),
    ]


def test_truncated_arguments_become_an_argument_error_not_a_crash(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(
        Reply(
            chunks=[
                chunk(tool_calls=[frag(0, "c1", "write", '{"path": "a", "text": "hal')]),
                chunk(finish="length"),
                DONE,
            ]
        )
    )
    response, _ = generate(model_for(server, policy), REQUEST)

    (call,) = response.tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "write", None)
    assert call.raw_arguments == '{"path": "a", "text": "hal'
    assert call.argument_error is not None and "not valid JSON" in call.argument_error
    assert response.stop_reason == "length"


def test_sse_framing_quirks_comments_crlf_split_lines_multiline_data(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    first = chunk("A").replace(b"\n", b"\r\n")
    multi = b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "B"}}]}\n\n'
    server.add(
        Reply(
            chunks=[
                b": keep-alive\n\n",
                first[:9],
                first[9:],
                b"event: message\nid: 7\n" + multi,
                chunk(finish="stop")[:5],
                chunk(finish="stop")[5:] + DONE,
            ]
        )
    )
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert (response.text, deltas) == ("AB", ["A", "B"])


def test_a_server_ignoring_stream_answers_whole(server: ScriptServer, policy: RetryPolicy) -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "whole",
                    "tool_calls": [
                        {
                            "id": "c9",
                            "type": "function",
                            "function": {"name": "read", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    server.add(Reply(body=json.dumps(body).encode()))
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert (response.text, deltas) == ("whole", ["whole"])
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [("c9", "read", {})]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (5, 2)


def test_error_object_mid_stream_is_retried_and_deltas_are_not_repeated(
    server: ScriptServer, policy: RetryPolicy, sleeps: Sleeps
) -> None:
    error = sse({"error": {"message": "The server had an error", "type": "server_error"}})
    server.add(
        Reply(chunks=[chunk("Hel"), error]),
        Reply(chunks=[chunk("Hel"), chunk("lo"), chunk(finish="stop"), DONE]),
    )
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert (response.text, deltas) == ("Hello", ["Hel", "lo"])
    assert len(server.requests) == 2 and len(sleeps.delays) == 1


def test_invalid_request_error_mid_stream_is_final(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    error = sse({"error": {"message": "bad schema", "type": "invalid_request_error"}})
    server.add(Reply(chunks=[error]))
    err = failure(model_for(server, policy), REQUEST)

    assert str(err) == "openai:gpt-4o: error in stream: bad schema"
    assert not err.retryable and len(server.requests) == 1


def test_stream_cut_before_done_is_retried(server: ScriptServer, policy: RetryPolicy) -> None:
    server.add(
        Reply(chunks=[chunk("par")]),
        Reply(chunks=[chunk("partial"), chunk(finish="stop"), DONE]),
    )
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert (response.text, deltas) == ("partial", ["par", "tial"])
    assert len(server.requests) == 2


def test_first_chunk_stall_is_retried(server: ScriptServer, policy: RetryPolicy) -> None:
    server.add(
        Reply(chunks=[STALL]),
        Reply(chunks=[chunk("ok"), chunk(finish="stop"), DONE]),
    )
    response, _ = generate(model_for(server, policy), REQUEST)

    assert response.text == "ok" and len(server.requests) == 2


def test_inter_chunk_stall_is_retried_without_duplicate_deltas(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(
        Reply(chunks=[chunk("The "), chunk("ans"), STALL]),
        Reply(chunks=[chunk("The "), chunk("answer"), chunk(finish="stop"), DONE]),
    )
    response, deltas = generate(model_for(server, policy), REQUEST)

    assert response.text == "The answer"
    assert deltas == ["The ", "ans", "wer"]
    assert len(server.requests) == 2


def test_stalls_until_retries_run_out_give_one_clear_line(
    server: ScriptServer, sleeps: Sleeps
) -> None:
    policy = RetryPolicy(max_retries=1, first_chunk_timeout=0.2, chunk_timeout=0.2, sleep=sleeps)
    server.add(Reply(chunks=[chunk("a"), STALL]), Reply(chunks=[STALL]))
    err = failure(model_for(server, policy), REQUEST)

    assert str(err) == (
        "openai:gpt-4o: stream stalled: no first chunk within 0.2s (gave up after 2 attempts)"
    )
    assert len(server.requests) == 2


def test_options_from_the_environment_shorten_the_stall_timeouts(server: ScriptServer) -> None:
    server.add(Reply(chunks=[STALL]), Reply(chunks=[chunk("ok"), chunk(finish="stop"), DONE]))
    model = resolve_model(
        "openai:local-model",
        env={
            "OPENAI_BASE_URL": server.url + "/v1",
            "EVE_MODEL_FIRST_CHUNK_TIMEOUT": "0.2",
            "EVE_MODEL_RETRY_BASE_DELAY": "0.001",
        },
    )
    response, _ = generate(model, REQUEST)

    assert response.text == "ok" and len(server.requests) == 2
    assert "authorization" not in server.requests[0].headers  # a local server needs no key


def test_unauthorized_is_not_retried_and_never_shows_the_key(
    server: ScriptServer, policy: RetryPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    body = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    server.add(Reply(401, body=json.dumps(body).encode()))
    model = model_for(server, policy)
    with caplog.at_level(logging.DEBUG):
        err = failure(model, REQUEST)

    assert str(err) == (
        "openai:gpt-4o (HTTP 401): Incorrect API key provided: ***. (check OPENAI_API_KEY)"
    )
    assert (err.status, err.retryable, len(server.requests)) == (401, False, 1)
    for text in (str(err), repr(err), repr(model), str(model), caplog.text):
        assert KEY not in text


@pytest.mark.parametrize("status", [400, 403, 404])
def test_client_errors_are_not_retried(
    server: ScriptServer, policy: RetryPolicy, status: int
) -> None:
    server.add(Reply(status, body=b'{"error": {"message": "nope"}}'))
    err = failure(model_for(server, policy), REQUEST)

    assert str(err).startswith(f"openai:gpt-4o (HTTP {status}): nope")
    assert len(server.requests) == 1


def test_missing_key_for_the_public_endpoint_names_the_variable() -> None:
    model = OpenAIModel("gpt-4o", env={})
    err = failure(model, REQUEST)

    assert "set OPENAI_API_KEY" in str(err) and "\n" not in str(err)


def test_stream_options_refused_by_a_server_is_dropped(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    refusal = b'{"error": {"message": "Unrecognized request argument: stream_options"}}'
    server.add(Reply(400, body=refusal), Reply(chunks=[chunk("ok"), chunk(finish="stop"), DONE]))
    response, _ = generate(model_for(server, policy), REQUEST)

    assert response.text == "ok"
    assert "stream_options" in server.requests[0].body
    assert "stream_options" not in server.requests[1].body


def test_max_tokens_uses_the_name_compatible_servers_know(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(Reply(chunks=[chunk(finish="stop"), DONE]))
    request = ModelRequest(system="", messages=[{"role": "user", "content": "hi"}], max_tokens=99)
    generate(model_for(server, policy), request)

    body = server.requests[0].body
    assert body["max_tokens"] == 99
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert "tools" not in body


def test_unreachable_server_is_retried_then_reported(sleeps: Sleeps) -> None:
    policy = RetryPolicy(max_retries=2, base_delay=0.01, sleep=sleeps)
    model = OpenAIModel("m", env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, retry=policy)
    err = failure(model, REQUEST)

    assert str(err).startswith("openai:m: cannot reach http://127.0.0.1:9")
    assert str(err).endswith("(gave up after 3 attempts)")
    assert len(sleeps.delays) == 2


def test_a_base_url_without_scheme_is_a_clear_error(policy: RetryPolicy) -> None:
    model = OpenAIModel("m", env={"OPENAI_BASE_URL": "localhost:11434/v1"}, retry=policy)
    err = failure(model, REQUEST)

    assert str(err) == (
        "openai:m: OPENAI_BASE_URL must start with http:// or https://, got 'localhost:11434/v1'"
    )


def test_an_unknown_history_role_fails_before_sending(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    request = ModelRequest(system="", messages=[{"role": "robot", "content": "x"}])
    err = failure(model_for(server, policy), request)

    assert str(err) == "openai:gpt-4o: history message 0 has unknown role 'robot'"
    assert server.requests == []
