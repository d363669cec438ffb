"""What a real provider request carries for MCP tools (an `anthropic:` model served by the
scripted HTTP server on 127.0.0.1, the real test MCP server on stdio): the servers' tools with
their schemas beside the local ones, a line in the system prompt for a server that is
unavailable, and an MCP image sent back to the model as an image block."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.mcp_tests.mcp_support import mcp_agent, stdio_entry
from tests.eve_cli.models.scriptserver import Reply, ScriptServer, sse
from tests.eve_cli.rt_support import AgentFactory, tool_file
from world import MemoryWorld

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SHOUT = tool_file(
    """
    @tool
    def shout(text: str) -> str:
        \"\"\"Upper-case a text.\"\"\"
        return text.upper()
    """
)


def an(kind: str, **data: object) -> bytes:
    return sse({"type": kind, **data}, event=kind)


START = an("message_start", message={"usage": {"input_tokens": 60, "output_tokens": 1}})
IMAGE_CALL = Reply(
    chunks=[
        START,
        an(
            "content_block_start",
            index=0,
            content_block={"type": "tool_use", "id": "toolu_1", "name": "mcp__srv__image"},
        ),
        an("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": ""}),
        an("content_block_stop", index=0),
        an("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
        an("message_stop"),
    ]
)
TEXT = Reply(
    chunks=[
        START,
        an("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        an("content_block_delta", index=0, delta={"type": "text_delta", "text": "A pixel."}),
        an("content_block_stop", index=0),
        an("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
        an("message_stop"),
    ]
)


@pytest.fixture
def model_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptServer]:
    server = ScriptServer()
    server.start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    try:
        yield server
    finally:
        server.stop()


def test_the_model_sees_mcp_tools_their_outage_and_their_images(
    tmp_path: Path, make_agent: AgentFactory, model_server: ScriptServer
) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "fail-start").write_text("")
    servers = {"srv": stdio_entry(tmp_path / "ctl", deny=["crash"]), "bad": stdio_entry(bad)}
    folder = make_agent(agent_args="model='anthropic:claude-test'", tools={"t": SHOUT})
    agent = mcp_agent(lambda **_: folder, [], servers)
    model_server.add(IMAGE_CALL, TEXT)
    rt = Runtime(agent_dir=agent, world=MemoryWorld())

    async def turn() -> str:
        sid = await rt.create_session()
        await rt.deliver(sid, "show me")
        assert (await rt.drive(sid))["status"] == "waiting"
        return sid

    asyncio.run(turn())
    first, second = (seen.body for seen in model_server.requests)
    tools = {tool["name"]: tool for tool in first["tools"]}
    assert {"shout", "ask_question", "mcp__srv__add", "mcp__srv__image"} <= set(tools)
    assert "mcp__srv__crash" not in tools and "mcp__srv__broken" not in tools  # denied, invalid
    assert tools["mcp__srv__add"]["input_schema"] == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    assert "MCP servers are unavailable now" in first["system"][0]["text"]
    assert "MCP server 'bad' failed to start" in first["system"][0]["text"]
    [result] = [
        block
        for message in second["messages"]
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    text, image = result["content"]
    assert text == {"type": "text", "text": "a pixel\n[image image/png, 70 bytes]"}
    assert image["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(PNG).decode(),
    }
    rt.close()
