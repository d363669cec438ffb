"""`RemoteRuntime`: the facade's methods over HTTP, as `eve chat --url` uses them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from eve_cli.channel.client import RemoteError, RemoteRuntime
from tests.eve_cli.channel.channel_support import (
    ServerThread,
    call,
    reply,
    write_agent,
    write_script,
)

TOOLS = """
from eve_cli import always, tool

@tool(approval=always())
def gate() -> str:
    \"\"\"Needs approval.\"\"\"
    return "gate open"
"""


def replies(events: Sequence[Mapping[str, Any]]) -> list[str]:
    return [e["text"] for e in events if e["type"] == "message.completed" and e.get("text")]


def test_remote_chat_round_trip(serve: Callable[..., ServerThread], tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "s.json", [reply("hello"), call("gate"), reply("after the gate")]
    )
    server = serve(write_agent(tmp_path / "agent", script, TOOLS))
    remote = RemoteRuntime(server.url)

    async def chat() -> None:
        sid = await remote.create_session()
        receipt = await remote.deliver(sid, "hi")
        assert receipt.disposition == "started"
        view = await remote.drive(sid)
        assert view["status"] == "waiting"
        texts = [
            e.get("text")
            for e in remote.events(sid)
            if e["type"] == "message.completed" and e.get("text")
        ]
        assert texts == ["hello"]

        await remote.deliver(sid, "open the gate")
        view = await remote.drive(sid)
        assert view["status"] == "parked"
        request = view["pending"][0]
        await remote.respond(sid, [{"requestId": request["requestId"], "approved": True}])
        view = await remote.drive(sid)
        assert view["status"] == "waiting"
        texts = [
            e.get("text")
            for e in remote.events(sid)
            if e["type"] == "message.completed" and e.get("text")
        ]
        assert texts == ["hello", "after the gate"]
        assert [s["id"] for s in remote.sessions()] == [sid]

        seen = []
        async for event in remote.tail(sid, -2 + len(remote.events(sid))):
            seen.append(event)
            if len(seen) == 2:
                break
        assert seen == remote.events(sid, -2)

    with remote:
        asyncio.run(chat())


def test_remote_errors_are_one_line(serve: Callable[..., ServerThread]) -> None:
    server = serve(token="t0k")
    with RemoteRuntime(server.url) as anonymous, pytest.raises(RemoteError) as caught:
        anonymous.sessions()
    assert caught.value.status == 401 and caught.value.code == "unauthorized"
    with RemoteRuntime(server.url, token="t0k") as remote:
        assert remote.sessions() == []
        with pytest.raises(RemoteError) as missing:
            remote.session("no-such-session")
        assert missing.value.status == 404 and "no-such-session" in str(missing.value)
        with pytest.raises(RemoteError) as malformed:
            asyncio.run(remote.deliver("bad.id", "x"))
        assert malformed.value.status == 400
    with RemoteRuntime("http://127.0.0.1:9") as nowhere, pytest.raises(RemoteError) as down:
        nowhere.sessions()
    assert down.value.code == "unreachable" and "127.0.0.1:9" in str(down.value)


def test_remote_drive_returns_for_a_message_queued_behind_a_park(
    serve: Callable[..., ServerThread], tmp_path: Path
) -> None:
    script = write_script(
        tmp_path / "s.json", [call("gate"), reply("gate passed"), reply("the queued one")]
    )
    server = serve(write_agent(tmp_path / "agent", script, TOOLS))

    async def chat(remote: RemoteRuntime) -> None:
        sid = await remote.create_session()
        await remote.deliver(sid, "open the gate")
        view = await remote.drive(sid)
        assert view["status"] == "parked"
        receipt = await remote.deliver(sid, "and then this", turn_policy="queue")
        assert receipt.disposition == "queued"
        view = await asyncio.wait_for(remote.drive(sid), 10)  # nothing runs until answered
        assert view["status"] == "parked"
        request = view["pending"][0]
        await remote.respond(sid, [{"requestId": request["requestId"], "approved": True}])
        view = await remote.drive(sid)
        while view["status"] == "running":  # the queued message's turn follows
            view = await remote.drive(sid)
        received = [e["text"] for e in remote.events(sid) if e["type"] == "message.received"]
        assert received == ["open the gate", "and then this"]
        assert replies(remote.events(sid))[-1] == "the queued one"

    with RemoteRuntime(server.url) as remote:
        asyncio.run(chat(remote))
