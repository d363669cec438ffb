"""Whole sessions on ``openai:`` and ``anthropic:`` models served by a real scripted server:
deltas in the events, tool calls round-tripped, no key on disk, and a kill -9 mid-stream."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from eve_cli.execution._view import SessionView
from eve_cli.runtime import Runtime
from tests.eve_cli.models.scriptserver import STALL, Reply, ScriptServer, sse
from tests.eve_cli.rt_support import DRIVER, AgentFactory, tool_file

OPENAI_KEY = "sk-session-openai-5c1f0e9d8b7a"
ANTHROPIC_KEY = "sk-ant-session-3e2d1c0b9a8f"
ECHO = tool_file('''
    @tool
    def echo(text: str) -> str:
        """Echo a text."""
        return f"echo: {text}"
''')


def oa_chunk(
    content: str | None = None, calls: list[Any] | None = None, finish: str | None = None
) -> bytes:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if calls is not None:
        delta["tool_calls"] = calls
    return sse({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


DONE = b"data: [DONE]\n\n"
USAGE = sse({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5}})
OA_TOOL_TURN = Reply(
    chunks=[
        oa_chunk(
            calls=[{"index": 0, "id": "call_1", "function": {"name": "echo", "arguments": None}}]
        ),
        oa_chunk(calls=[{"index": 0, "function": {"arguments": '{"te'}}]),
        oa_chunk(calls=[{"index": 0, "function": {"arguments": 'xt": "hi"}'}}]),
        oa_chunk(finish="tool_calls"),
        DONE,
    ]
)
# The pause after the first text: it is stored as its own event at once (time to first text),
# the rest, arriving later, as the next.
FIRST_TEXT_PAUSE = 0.05
OA_TEXT_TURN = Reply(
    chunks=[
        oa_chunk("All "),
        FIRST_TEXT_PAUSE,
        oa_chunk("done."),
        oa_chunk(finish="stop"),
        USAGE,
        DONE,
    ]
)


def an(kind: str, **data: Any) -> bytes:
    return sse({"type": kind, **data}, event=kind)


AN_START = an("message_start", message={"usage": {"input_tokens": 60, "output_tokens": 1}})
AN_TOOL_TURN = Reply(
    chunks=[
        AN_START,
        an(
            "content_block_start",
            index=0,
            content_block={"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {}},
        ),
        an(
            "content_block_delta",
            index=0,
            delta={"type": "input_json_delta", "partial_json": '{"text":'},
        ),
        an("ping"),
        an(
            "content_block_delta",
            index=0,
            delta={"type": "input_json_delta", "partial_json": ' "hi"}'},
        ),
        an("content_block_stop", index=0),
        an("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
        an("message_stop"),
    ]
)
AN_TEXT_TURN = Reply(
    chunks=[
        AN_START,
        an("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        an("content_block_delta", index=0, delta={"type": "text_delta", "text": "All "}),
        FIRST_TEXT_PAUSE,
        an("content_block_delta", index=0, delta={"type": "text_delta", "text": "done."}),
        an("content_block_stop", index=0),
        an("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
        an("message_stop"),
    ]
)


@pytest.fixture
def provider_env(server: ScriptServer, monkeypatch: pytest.MonkeyPatch) -> ScriptServer:
    """Point both providers at the scripted server, with keys in ``.env`` (not the process)."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("EVE_MODEL_RETRY_BASE_DELAY", "0.01")
    Path(".env").write_text(f"OPENAI_API_KEY={OPENAI_KEY}\nANTHROPIC_API_KEY={ANTHROPIC_KEY}\n")
    return server


def session(agent: Path, message: str) -> tuple[Runtime, str, SessionView]:
    rt = Runtime(agent_dir=agent)

    async def main() -> tuple[str, SessionView]:
        sid = await rt.create_session()
        receipt = await rt.deliver(sid, message)
        assert receipt.disposition == "started", receipt
        return sid, await rt.drive(sid)

    sid, view = asyncio.run(main())
    return rt, sid, view


def of_type(events: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [e for e in events if e["type"] == kind]


@pytest.mark.parametrize(
    ("model", "replies", "key_header"),
    [
        (
            "openai:gpt-test",
            [OA_TOOL_TURN, OA_TEXT_TURN],
            ("authorization", f"Bearer {OPENAI_KEY}"),
        ),
        ("anthropic:claude-test", [AN_TOOL_TURN, AN_TEXT_TURN], ("x-api-key", ANTHROPIC_KEY)),
    ],
)
def test_a_session_streams_deltas_and_round_trips_tool_calls(
    provider_env: ScriptServer,
    make_agent: AgentFactory,
    model: str,
    replies: list[Reply],
    key_header: tuple[str, str],
) -> None:
    server = provider_env
    server.add(*replies)
    agent = make_agent(agent_args=f"model={model!r}", tools={"t": ECHO}, instructions="Be a test.")
    rt, sid, view = session(agent, "say hi")
    events = rt.events(sid)

    assert view["status"] == "waiting"
    assert [e["delta"] for e in of_type(events, "message.appended")] == ["All ", "done."]
    assert [e["text"] for e in of_type(events, "message.completed")] == ["", "All done."]
    [result] = of_type(events, "action.result")
    assert (result["name"], result["output"], result["isError"]) == ("echo", "echo: hi", False)
    assert len(server.requests) == 2
    name, value = key_header
    assert all(seen.headers[name] == value for seen in server.requests)
    second = server.requests[1].body
    if model.startswith("openai"):
        assert second["messages"][0]["role"] == "system"
        assert "Be a test." in second["messages"][0]["content"]
        assert second["messages"][-2]["tool_calls"][0]["function"] == {
            "name": "echo",
            "arguments": '{"text": "hi"}',
        }
        assert second["messages"][-1] == {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "echo: hi",
        }
    else:
        assert "Be a test." in second["system"][0]["text"]
        assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
        assert second["messages"][1]["content"] == [
            {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "hi"}}
        ]
        assert second["messages"][2]["content"] == [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "is_error": False,
                "content": "echo: hi",
                "cache_control": {"type": "ephemeral"},
            }
        ]


def test_no_key_reaches_the_data_directory(
    provider_env: ScriptServer, make_agent: AgentFactory, isolated: Path
) -> None:
    server = provider_env
    echoed = json.dumps({"error": {"message": f"Incorrect API key provided: {OPENAI_KEY}"}})
    server.add(Reply(401, body=echoed.encode()), OA_TOOL_TURN, OA_TEXT_TURN)
    agent = make_agent(agent_args="model='openai:gpt-test'", tools={"t": ECHO})
    rt, sid, _ = session(agent, "first")
    failed = [e["error"] for e in rt.events(sid) if e["type"] == "step.failed"]
    assert failed == [
        "openai:gpt-test (HTTP 401): Incorrect API key provided: *** (check OPENAI_API_KEY)"
    ]

    async def again() -> SessionView:
        await rt.deliver(sid, "second")
        return await rt.drive(sid)

    assert asyncio.run(again())["status"] == "waiting"
    assert len(server.requests) == 3
    assert server.requests[-1].headers["authorization"] == f"Bearer {OPENAI_KEY}"
    data = isolated / ".workflow-data"
    files = [path for path in data.rglob("*") if path.is_file()]
    assert files, "the session wrote nothing?"
    for path in files:
        assert OPENAI_KEY.encode() not in path.read_bytes(), path
        assert ANTHROPIC_KEY.encode() not in path.read_bytes(), path


class Driver:
    """A subprocess driving one session (rt_support.DRIVER); stdout lines read by a thread."""

    def __init__(self, data: Path, agent: Path, sid: str) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(data), str(agent), "drive", sid],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, marker: str, count: int = 1, timeout: float = 30) -> list[str]:
        seen: list[str] = []
        while count:
            line = self.lines.get(timeout=timeout)
            if line is None:
                raise AssertionError(f"driver ended before {marker!r}: {seen} {self.stderr()}")
            seen.append(line)
            count -= line == marker
        return seen

    def stderr(self) -> str:
        _, err = self.popen.communicate(timeout=30)
        return err

    def close(self) -> int:
        self.popen.communicate(timeout=30)
        return self.popen.returncode


def test_kill_mid_stream_then_resume_requests_the_call_once_more(
    provider_env: ScriptServer, make_agent: AgentFactory, isolated: Path
) -> None:
    server = provider_env
    answer: list[bytes | float | str] = [
        oa_chunk("The answer"),
        oa_chunk(" is"),
        oa_chunk(" 42."),
        oa_chunk(finish="stop"),
        DONE,
    ]
    # The pause: the first text is stored at once, the second 0.2 s later (two events).
    stalled = [answer[0], FIRST_TEXT_PAUSE, answer[1], STALL]
    server.add(Reply(chunks=stalled), Reply(chunks=answer))
    agent = make_agent(agent_args="model='openai:gpt-test'")
    data = isolated / ".workflow-data"
    rt = Runtime(data_dir=data, agent_dir=agent)

    async def prepare() -> str:
        sid = await rt.create_session()
        await rt.deliver(sid, "what is the answer?")
        return sid

    sid = asyncio.run(prepare())
    first = Driver(data, agent, sid)
    first.wait_for("EVENT message.appended", count=2)  # mid-stream: the server now stalls
    first.popen.send_signal(signal.SIGKILL)
    assert first.close() == -signal.SIGKILL
    assert len(server.requests) == 1

    second = Driver(data, agent, sid)
    assert second.wait_for("VIEW waiting")[-1] == "VIEW waiting"
    assert second.close() == 0

    # The interrupted call, and only it, was requested again, identically.
    assert len(server.requests) == 2
    assert server.requests[1].body == server.requests[0].body
    events = rt.events(sid)
    assert [e["text"] for e in of_type(events, "message.completed")] == ["The answer is 42."]
    deltas = "".join(e["delta"] for e in of_type(events, "message.appended"))
    assert deltas == "The answer is 42."
    assert [e["type"] for e in events] == [
        "session.started",
        "session.waiting",
        "turn.started",
        "message.received",
        "step.started",
        "message.appended",
        "message.appended",
        "message.appended",
        "message.completed",
        "step.completed",
        "turn.completed",
        "session.waiting",
    ]
