"""Sessions belong to who created them (SPEC §18): over HTTP, SSE and MCP another user is told
a session does not exist, lists only its own, and cannot approve without the scope; admins
see everything; a tenant shares its sessions; the owner is kept durably with the session."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from tests.eve_cli.mcp_tests.test_mcp_serve import http_client, refused, use

GATED = """
from eve_cli import always, tool

@tool(approval=always())
def gate(reason: str) -> str:
    \"\"\"Needs the user's approval.\"\"\"
    return "passed " + reason
"""
ALL = frozenset({"read", "send", "approve"})
TOKENS = {
    "tok-alice": Principal("alice", scopes=ALL),
    "tok-bob": Principal("bob", scopes=ALL),
    "tok-carol": Principal("carol", scopes=frozenset({"read", "send"})),
    "tok-ann": Principal("ann", tenant="acme", scopes=ALL),
    "tok-arno": Principal("arno", tenant="acme", scopes=ALL),
    "tok-root": Principal("root", scopes=frozenset({"admin"})),
}


def as_(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "content-type": "application/json"}


@pytest.fixture
def server(serve: Callable[..., ServerThread], tmp_path: Path) -> ServerThread:
    script = write_script(tmp_path / "s.json", [call("gate", reason="r")] + [reply("ok")] * 8)
    agent = write_agent(tmp_path / "agent", script, GATED)
    return serve(agent, auth=Verifiers(StaticTokens(TOKENS)))


def client(server: ServerThread, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/eve/v1", headers=as_(token), timeout=WAIT)


def create(server: ServerThread, token: str, **body: Any) -> str:
    with client(server, token) as c:
        answer = c.post("/session", json=body)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["sessionId"])


def test_another_user_is_told_a_session_does_not_exist(server: ServerThread) -> None:
    sid = create(server, "tok-alice", message="hi")
    read_events(server.url, sid, of_type("turn.waiting"), headers=as_("tok-alice"))
    unknown = "s_" + "0" * 24
    with client(server, "tok-bob") as bob:
        missing = bob.get(f"/session/{unknown}").json()["error"]["message"]
        for method, path in [
            ("GET", f"/session/{sid}"), ("GET", f"/session/{sid}/stream"),
            ("GET", f"/session/{sid}.1"), ("POST", f"/session/{sid}/fork"),
            ("POST", f"/session/{sid}/cancel"), ("POST", f"/session/{sid}/reset"),
        ]:  # fmt: skip
            answer = bob.request(method, path, content=b"{}")
            assert answer.status_code == 404, (method, path, answer.text)
            named = path.split("/")[2]  # the id as the path has it
            assert answer.json()["error"]["message"] == missing.replace(unknown, named)
        said = bob.post(f"/session/{sid}", json={"message": "mine now"})
        assert said.status_code == 404
        answered = bob.post(f"/session/{sid}", json={"inputResponses": [
            {"requestId": "x", "approved": True}]})  # fmt: skip
        assert answered.status_code == 404
        assert bob.get("/sessions").json()["sessions"] == []
    with client(server, "tok-root") as root:
        assert [r["id"] for r in root.get("/sessions").json()["sessions"]] == [sid]
        assert root.get(f"/session/{sid}").status_code == 200
    with client(server, "tok-alice") as alice:
        rows = alice.get("/sessions").json()["sessions"]
        assert [(r["id"], r["owner"]) for r in rows] == [(sid, {"subject": "alice"})]
        me = alice.get("/info").json()["principal"]
        assert me == {"subject": "alice", "scopes": ["approve", "read", "send"]}


def test_approving_needs_the_approve_scope(server: ServerThread) -> None:
    sid = create(server, "tok-carol", message="hi")
    read_events(server.url, sid, of_type("turn.waiting"), headers=as_("tok-carol"))
    with client(server, "tok-carol") as carol:
        pending = carol.get(f"/session/{sid}").json()["pending"]
        assert [p["kind"] for p in pending] == ["approval"]
        body = {"inputResponses": [{"requestId": pending[0]["requestId"], "approved": True}]}
        refused_ = carol.post(f"/session/{sid}", json=body)
        assert refused_.status_code == 403
        assert "'approve' scope" in refused_.json()["error"]["message"]
        assert carol.post(f"/session/{sid}", json={"message": "still mine"}).status_code == 202


def test_a_tenant_shares_its_sessions_and_operation_ids_are_each_owners(
    server: ServerThread,
) -> None:
    mine = create(server, "tok-ann", operationId="op-1")
    assert create(server, "tok-arno", operationId="op-1") == mine  # the same tenant's id
    theirs = create(server, "tok-alice", operationId="op-1")
    assert theirs != mine  # another owner's same id is another session
    with client(server, "tok-arno") as arno:
        assert arno.get(f"/session/{mine}").status_code == 200
        assert [r["id"] for r in arno.get("/sessions").json()["sessions"]] == [mine]
        assert arno.get(f"/session/{theirs}").status_code == 404


def test_a_fork_is_its_makers(server: ServerThread) -> None:
    sid = create(server, "tok-alice", message="hi")
    read_events(server.url, sid, of_type("turn.waiting"), headers=as_("tok-alice"))
    with client(server, "tok-root") as root:
        fork = root.post(f"/session/{sid}/fork", json={})
        assert fork.status_code == 201, fork.text
        forked = fork.json()["sessionId"]
    with client(server, "tok-alice") as alice:
        assert alice.get(f"/session/{forked}").status_code == 404  # root's, not alice's
        assert alice.get(f"/session/{sid}").json()["forks"] == []  # not listed to her either
    with client(server, "tok-root") as root:
        view = root.get(f"/session/{forked}").json()
        assert view["forkedFrom"]["by"] == {"subject": "root"}


def test_mcp_calls_see_only_the_callers_sessions(server: ServerThread) -> None:
    async def main() -> None:
        async with http_client(server.url, "tok-alice") as alice:
            started = await use(alice, "agent_start", message="hi", key="k1")
            sid = started["sessionId"]
        async with http_client(server.url, "tok-bob") as bob:
            for tool in ("agent_get", "agent_cancel"):
                assert await refused(bob, tool, sessionId=sid) == f"no session {sid!r}"
            said = await refused(bob, "agent_send", sessionId=sid, message="x")
            assert said == f"no session {sid!r}"
            other = await use(bob, "agent_start", message="hi", key="k1")
            assert other["sessionId"] != sid
        async with http_client(server.url, "tok-carol") as carol:
            mine = await use(carol, "agent_start", message="hi", key="k2", wait=WAIT)
            [asked] = mine["pending"]
            answer = [{"requestId": asked["requestId"], "approved": True}]
            said = await refused(carol, "agent_respond", sessionId=mine["sessionId"],
                                 responses=answer)  # fmt: skip
            assert said == "this needs the 'approve' scope; carol has read, send"

    asyncio.run(main())
    with client(server, "tok-root") as root:
        rows = root.get("/sessions").json()["sessions"]
    owners = sorted(json.dumps(r["owner"]) for r in rows)
    assert owners == sorted(json.dumps({"subject": s}) for s in ("alice", "bob", "carol"))
