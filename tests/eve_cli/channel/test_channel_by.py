"""Who said what (SPEC §18): each delivery, answer, cancel and clear records its principal
(``by``) in the session's events and view, and tools read ``ctx.principal`` (who sent the
message the turn serves) and ``ctx.initiator`` (who created the session)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from eve_cli.auth import Principal, StaticTokens, Verifiers
from tests.eve_cli.channel.channel_support import (
    WAIT,
    ServerThread,
    call,
    of_type,
    read_events,
    reply,
    write_agent,
    write_script,
)

TOOLS = """
from eve_cli import ToolContext, always, tool

@tool
def whoami(ctx: ToolContext) -> str:
    \"\"\"Who is asking.\"\"\"
    return f"principal={ctx.principal} initiator={ctx.initiator}"

@tool(approval=always())
def gate() -> str:
    \"\"\"Needs approval.\"\"\"
    return "passed"
"""
TOKENS = {
    "tok-alice": Principal("alice", tenant="acme", scopes=frozenset({"read", "send", "approve"})),
    "tok-root": Principal("root", scopes=frozenset({"admin"})),
}


def as_(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "content-type": "application/json"}


@pytest.fixture
def server(serve: Callable[..., ServerThread], tmp_path: Path) -> ServerThread:
    script = write_script(
        tmp_path / "s.json",
        [call("whoami"), reply("one"), call("whoami"), reply("two"), call("gate"),
         reply("three"), reply("four")],
    )  # fmt: skip
    return serve(
        write_agent(tmp_path / "agent", script, TOOLS), auth=Verifiers(StaticTokens(TOKENS))
    )


def test_principals_are_recorded_and_tools_read_them(server: ServerThread) -> None:
    alice = {"subject": "alice", "tenant": "acme"}
    root = {"subject": "root"}
    api = server.url + "/eve/v1"
    with httpx.Client(timeout=WAIT) as http:
        sid = http.post(f"{api}/session", headers=as_("tok-alice"),
                        json={"message": "who?"}).json()["sessionId"]  # fmt: skip
        first = read_events(server.url, sid, of_type("turn.completed"), headers=as_("tok-root"))
        http.post(f"{api}/session/{sid}", headers=as_("tok-root"), json={"message": "and now?"})
        events = read_events(server.url, sid, of_type("turn.completed"), len(first),
                             headers=as_("tok-root"))  # fmt: skip
        http.post(f"{api}/session/{sid}", headers=as_("tok-alice"), json={"message": "gate"})
        read_events(server.url, sid, of_type("turn.waiting"), headers=as_("tok-alice"))
        pending = http.get(f"{api}/session/{sid}", headers=as_("tok-alice")).json()["pending"]
        answer = [{"requestId": pending[0]["requestId"], "approved": True}]
        http.post(f"{api}/session/{sid}", headers=as_("tok-alice"),
                  json={"inputResponses": answer})  # fmt: skip
        read_events(server.url, sid, of_type("turn.completed"), len(first) + len(events),
                    headers=as_("tok-alice"))  # fmt: skip
        http.post(f"{api}/session/{sid}/clear", headers=as_("tok-root"), json={})
        read_events(server.url, sid, of_type("context.cleared"), headers=as_("tok-root"))
        every = http.get(f"{api}/session/{sid}/stream?follow=false",
                         headers=as_("tok-root")).text  # fmt: skip
        view = http.get(f"{api}/session/{sid}", headers=as_("tok-alice")).json()
    outputs = [e["output"] for e in first + events if e["type"] == "action.result"]
    assert outputs == [
        f"principal={alice} initiator={alice}",
        f"principal={root} initiator={alice}",
    ]
    stored = [json.loads(line) for line in every.splitlines() if line.strip()]
    received = [e["by"] for e in stored if e["type"] == "message.received"]
    assert received == [alice, root, alice]
    assert [e["by"] for e in stored if e["type"] == "input.resolved"] == [alice]
    assert [e["by"] for e in stored if e["type"] == "context.cleared"] == [root]
    assert [t["by"] for t in view["turns"]] == [alice, root, alice]
    assert view["turns"][2]["steps"][0]["actions"][0]["answer"]["by"] == alice
    shown = subprocess.run([sys.executable, "-m", "eve_cli", "log", sid], capture_output=True,
                           text=True, timeout=WAIT, check=True).stdout.splitlines()  # fmt: skip
    assert "› alice@acme: who?" in shown and "› root: and now?" in shown
    assert "approved (by alice@acme)" in shown and "history cleared (by root)" in shown
    command = [sys.executable, "-m", "eve_cli", "inspect", sid, "--json"]
    inspected = subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=True)
    turns = json.loads(inspected.stdout)["turns"]
    assert [t.get("by") for t in turns] == ["alice@acme", "root", "alice@acme"]
