"""The agent as an MCP server, driven by the SDK's real client: `eve mcp` over stdio (a real
eve process per connection, on every world other processes can open) and `/mcp` on the
HTTP channel (a real uvicorn server on 127.0.0.1, behind the channel's token and guard)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from eve_cli.channel import ChannelSettings
from eve_cli.runtime import Runtime
from tests.eve_cli.channel.channel_support import ServerThread
from tests.eve_cli.rt_support import DANGER_TOOL, AgentFactory, call, reply
from world import MemoryWorld

TOOLS = ["agent_start", "agent_send", "agent_get", "agent_respond", "agent_cancel"]
SCRIPT = [
    reply("hello"),
    reply("", call("danger", x=7)),
    reply("approved and done"),
    reply("and the queued one"),
]


async def use(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    data = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert result.structured_content == data
    return data  # type: ignore[no-any-return]


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return str(result.content[0].text)  # type: ignore[union-attr]


def eve_mcp(agent: Path, world_spec: str) -> StdioServerParameters:
    where = "--world" if world_spec.startswith("postgresql") else "--data"
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "eve_cli", where, world_spec, "mcp", "--agent", str(agent)],
        env={"PYTHONPATH": os.environ["PYTHONPATH"], "NO_COLOR": "1"},
    )


def test_eve_mcp_over_stdio(make_agent: AgentFactory, world_spec: str) -> None:
    agent = make_agent(script=SCRIPT, tools={"danger": DANGER_TOOL})
    lines: list[str] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        lines.append(str(message))

    async def first_connection() -> tuple[str, str]:
        async with Client(eve_mcp(agent, world_spec), cache=None) as client:
            assert [t.name for t in (await client.list_tools()).tools] == TOOLS
            arguments = {"message": "hi", "key": "order-1", "wait": 30}
            raw = await client.call_tool("agent_start", arguments, progress_callback=report)
            started = json.loads(raw.content[0].text)  # type: ignore[union-attr]
            assert (started["created"], started["status"], started["reply"]) == (
                True, "waiting", "hello",
            )  # fmt: skip
            sid = started["sessionId"]
            # The same key again is the same session, and its message is not delivered again.
            again = await use(client, "agent_start", message="hi", key="order-1")
            assert (again["sessionId"], again["created"], "disposition" in again) == (
                sid, False, False,
            )  # fmt: skip
            assert [e["type"] for e in again["events"]].count("turn.started") == 1
            sent = await use(client, "agent_send", sessionId=sid, message="do it", wait=30)
            assert (sent["disposition"], sent["status"], sent["parkedOn"]) == (
                "started", "parked", "approval",
            )  # fmt: skip
            # The new turn waits for an approval: it has no reply yet (the first turn's is not).
            assert (sent["reply"], sent["turn"]["number"], sent["turn"]["status"]) == (
                None, 2, "parked",
            )  # fmt: skip
            [pending] = sent["pending"]
            assert (pending["tool"], pending["arguments"]) == ("danger", {"x": 7})
            assert "no session 'nope'" in await refused(client, "agent_get", sessionId="nope")
            bad = await refused(client, "agent_send", sessionId=sid)
            assert "invalid arguments for agent_send" in bad and "'message'" in bad
            return sid, pending["requestId"]

    async def second_connection(sid: str, request: str) -> None:
        # A new connection (a new eve process) finds the parked session as it was left.
        async with Client(eve_mcp(agent, world_spec), cache=None) as client:
            got = await use(client, "agent_get", sessionId=sid)
            assert (got["status"], got["pending"][0]["requestId"]) == ("parked", request)
            later = {"sessionId": sid, "message": "then this", "policy": "queue"}
            assert (await use(client, "agent_send", **later))["disposition"] == "queued"
            answer = {"requestId": request, "approved": True}
            done = await use(client, "agent_respond", sessionId=sid, responses=[answer], wait=30)
            # The approved call finished its turn, then the queued message had its own.
            assert (done["status"], done["reply"]) == ("waiting", "and the queued one")
            assert done["turn"] == {"id": "t3", "number": 3, "status": "completed"}
            texts = [e.get("text") for e in done["events"] if e["type"] == "message.completed"]
            assert texts[-2:] == ["approved and done", "and the queued one"]
            tail = await use(client, "agent_get", sessionId=sid, since=done["next"] - 2)
            assert [e["index"] for e in tail["events"]] == [done["next"] - 2, done["next"] - 1]
            assert tail["next"] == done["next"]
            cancelled = await use(client, "agent_cancel", sessionId=sid)
            assert cancelled["cancelled"] is True

    sid, request = asyncio.run(first_connection())
    # Progress notifications, one per event of the turn, for the call that asked for them.
    assert lines[:1] == ["session.started"] and "message.completed: hello" in lines
    assert lines[-1] == "session.waiting"
    asyncio.run(second_connection(sid, request))
    rt = Runtime(data_dir=world_spec, agent_dir=agent)
    results = [e for e in rt.events(sid) if e["type"] == "action.result"]
    assert [(e["name"], e["output"]) for e in results] == [("danger", "7")]
    rt.close()


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), cache=None) as client,
    ):
        yield client


def test_the_channel_serves_mcp_behind_its_token(make_agent: AgentFactory) -> None:
    agent = make_agent(script=SCRIPT[:1])
    settings = ChannelSettings(token="s3cret-token", info={"agent": "tester"})
    server = ServerThread(lambda: Runtime(agent_dir=agent, world=MemoryWorld()), settings).start()
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        plain = httpx.post(f"{server.url}/mcp", json=body, timeout=10)
        assert plain.status_code == 401  # no token: refused before the MCP server is reached
        foreign = httpx.post(
            f"{server.url}/mcp",
            json=body,
            headers={"Authorization": "Bearer s3cret-token", "Origin": "https://evil.example"},
            timeout=10,
        )
        assert foreign.status_code == 403  # a web page cannot drive it

        async def session() -> str:
            async with http_client(server.url, "s3cret-token") as client:
                assert [t.name for t in (await client.list_tools()).tools] == TOOLS
                started = await use(client, "agent_start", message="hi", wait=30)
                assert (started["status"], started["reply"]) == ("waiting", "hello")
                return str(started["sessionId"])

        async def again(sid: str) -> None:
            async with http_client(server.url, "s3cret-token") as client:
                got = await use(client, "agent_get", sessionId=sid)
                assert (got["status"], got["reply"]) == ("waiting", "hello")

        sid = asyncio.run(session())
        asyncio.run(again(sid))
    finally:
        server.stop()
