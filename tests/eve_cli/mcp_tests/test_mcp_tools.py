"""MCP servers' tools in an agent, against the real test server (stdio and Streamable HTTP on
127.0.0.1): results (text, images as bytes, structured content), tool errors instead of
failed turns, a tool added between turns, one server reused across turns and started again
after a crash, unavailable servers, hostile answers, allow/deny lists and approvals, and
`${VAR}` values that reach the server but never the store."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import pytest

from eve_cli.runtime import Runtime
from eve_cli.testing import chat
from tests.eve_cli.mcp_tests.mcp_support import (
    alive,
    calls,
    mcp_agent,
    pids,
    start_http_server,
    stdio_entry,
)
from tests.eve_cli.rt_support import AgentFactory, call, reply, tool_file
from world import MemoryWorld

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
NO_TOOL = "MCP server 'srv' has no usable tool 'mcp__srv__{}'"
LOCAL_TOOL = tool_file(
    """
    @tool
    def shout(text: str) -> str:
        \"\"\"Upper-case a text.\"\"\"
        return text.upper()
    """
)


def run(rt: Runtime, *messages: str) -> tuple[str, list[dict[str, Any]]]:
    """Chat ``messages`` in one new session; its id and tool messages."""

    async def go() -> str:
        sid = await rt.create_session()
        for message in messages:
            view = await chat(rt, sid, message)
            assert view["status"] in ("waiting", "parked"), view
        return sid

    sid = asyncio.run(go())
    return sid, [m for m in rt.history(sid) if m["role"] == "tool"]


def results(rt: Runtime, sid: str) -> list[tuple[str, str, bool]]:
    return [
        (e["name"], e["output"], e["isError"])
        for e in rt.events(sid)
        if e["type"] == "action.result"
    ]


def test_results_errors_a_new_tool_and_a_crash(tmp_path: Path, make_agent: AgentFactory) -> None:
    ctl = tmp_path / "ctl"
    script = [
        reply(
            "",
            call("shout", text="hi"),
            call("mcp__srv__add", a=2, b=3),
            call("mcp__srv__image"),
            call("mcp__srv__record", text="kept"),
            call("mcp__srv__add", a="x"),  # invalid: a tool error the model sees
            call("mcp__srv__late"),  # not listed yet
            call("mcp__srv__crash"),
        ),
        reply("turn one done"),
        reply("", call("mcp__srv__late"), call("mcp__srv__add", a=1, b=1)),
        reply("turn two done"),
    ]
    agent = mcp_agent(make_agent, script, {"srv": stdio_entry(ctl)}, tools={"local": LOCAL_TOOL})
    rt = Runtime(agent_dir=agent, world=MemoryWorld())

    async def turns() -> str:
        sid = await rt.create_session()
        assert (await chat(rt, sid, "one"))["status"] == "waiting"
        (ctl / "late").write_text("")  # the server lists a new tool from now on
        assert (await chat(rt, sid, "two"))["status"] == "waiting"
        return sid

    sid = asyncio.run(turns())
    got = results(rt, sid)
    assert got[:4] == [
        ("shout", "HI", False),
        ("mcp__srv__add", "5", False),
        ("mcp__srv__image", "a pixel\n[image image/png, 70 bytes]", False),
        ("mcp__srv__record", "recorded kept", False),
    ]
    _, output, is_error = got[4]
    assert is_error and "Invalid arguments for tool 'mcp__srv__add'" in output
    assert "'x' is not of type 'integer'" in output
    assert got[5] == ("mcp__srv__late", NO_TOOL.format("late"), True)
    _, output, is_error = got[6]
    assert is_error and output.startswith("MCP server 'srv' failed during a call of")
    assert "exited with code 3" in output and "boom: crashing on purpose" in output
    # Turn two: the new tool is there, and the crashed server was started again.
    assert got[7:] == [("mcp__srv__late", "no tool late", True), ("mcp__srv__add", "2", False)]
    assert len(pids(ctl)) == 2
    # Images are kept as bytes, structured content as data, with the tool message.
    tools = [m for m in rt.history(sid) if m["role"] == "tool"]
    assert tools[2]["parts"] == [{"type": "image", "mimeType": "image/png", "data": PNG}]
    assert tools[3]["structured"] == {"text": "kept"}
    assert calls(ctl)["call add -"] == 0  # every call carried its idempotency key
    rt.close()
    assert not any(alive(p) for p in pids(ctl))


def test_one_server_serves_every_turn_and_session_of_a_process(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    """Declared by `define_agent(mcp_servers=)`, with a callable approval policy for a tool."""
    ctl = tmp_path / "ctl"
    script = [
        reply("", call("mcp__srv__add", a=1, b=2), call("mcp__srv__add", a=13, b=0)),
        reply("ok"),
    ]
    entry = stdio_entry(ctl)
    declared = (
        f"mcp_servers={{'srv': {{'command': {entry['command']!r}, 'args': {entry['args']!r}, "
        "'approval': {'add': lambda args: 'denied' if args.get('a') == 13 else 'approved'}}}"
    )
    rt = Runtime(agent_dir=make_agent(script=script, agent_args=declared), world=MemoryWorld())

    async def sessions() -> list[str]:
        sids = []
        for _ in range(3):
            sids.append(await rt.create_session())
            await chat(rt, sids[-1], "go")
        return sids

    for sid in asyncio.run(sessions()):
        assert results(rt, sid) == [
            ("mcp__srv__add", "3", False),
            ("mcp__srv__add", "The approval policy denied this call.", True),
        ]
    assert len(pids(ctl)) == 1
    assert sum(n for line, n in calls(ctl).items() if line.startswith("done add")) == 3
    rt.close()


def test_an_unavailable_server_leaves_the_turn_going(
    tmp_path: Path, make_agent: AgentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    bad.mkdir()
    (bad / "fail-start").write_text("")
    script = [
        reply("", call("mcp__bad__add", a=1, b=1), call("mcp__good__add", a=1, b=1)),
        reply("ok"),
        reply("again"),
    ]
    servers = {
        "good": stdio_entry(good),
        "bad": stdio_entry(bad),
        "missing": {"command": str(tmp_path / "no-such-server")},
    }
    rt = Runtime(agent_dir=mcp_agent(make_agent, script, servers), world=MemoryWorld())
    sid, _ = run(rt, "go")
    [(_, bad_out, bad_err), good_result] = results(rt, sid)
    assert bad_err and "MCP server 'bad' failed to start: exited with code 2" in bad_out
    assert "cannot open the database: permission denied" in bad_out
    assert good_result == ("mcp__good__add", "2", False)
    # One warning per server and reason (stderr, in eve), naming the server and its stderr's
    # end; a second turn says nothing new.
    asyncio.run(chat(rt, sid, "again"))
    lines = [r.getMessage() for r in caplog.records if r.name == "eve_cli.mcp"]
    assert sum("MCP server 'bad' failed to start" in line for line in lines) == 1, lines
    assert any("'missing'" in line and "cannot run" in line for line in lines), lines
    rt.close()


def test_hostile_answers_are_bounded(tmp_path: Path, make_agent: AgentFactory) -> None:
    ctl = tmp_path / "ctl"
    script = [
        reply(
            "",
            call("mcp__srv__huge", size=300_000),
            call("mcp__srv__slow", seconds=30),
            call("mcp__srv__huge", size=17 << 20),  # one message over the limit
            call("mcp__srv__broken"),  # listed with an invalid schema: kept from the model
            call("mcp__srv__add", a=4, b=4),  # a fresh server after the bad message
        ),
        reply("ok"),
    ]
    entry = stdio_entry(ctl, timeout={"slow": 1, "*": 30})
    rt = Runtime(agent_dir=mcp_agent(make_agent, script, {"srv": entry}), world=MemoryWorld())
    sid, _ = run(rt, "go")
    huge, slow, too_big, broken, add = results(rt, sid)
    assert len(huge[1]) < 100_100 and huge[1].endswith("[cut: 200000 more characters]")
    assert slow[2] and "did not answer a call of 'mcp__srv__slow' within 1 s" in slow[1]
    assert too_big[2] and "sent a message over 16 MiB" in too_big[1]
    assert broken == ("mcp__srv__broken", NO_TOOL.format("broken"), True)
    assert add == ("mcp__srv__add", "8", False)
    rt.close()


def test_allow_deny_and_approval_policies(tmp_path: Path, make_agent: AgentFactory) -> None:
    ctl = tmp_path / "ctl"
    script = [
        reply(
            "",
            call("mcp__srv__image"),  # not allowed
            call("mcp__srv__crash"),  # denied
            call("mcp__srv__record", text="a"),  # once: asks
        ),
        reply("", call("mcp__srv__record", text="b"), call("mcp__srv__add", a=1, b=2)),
        reply("ok"),
    ]
    entry = stdio_entry(
        ctl,
        allow=["record", "add", "crash"],
        deny=["crash"],
        approval={"record": "once", "*": "always"},
    )
    rt = Runtime(agent_dir=mcp_agent(make_agent, script, {"srv": entry}), world=MemoryWorld())

    async def go() -> str:
        sid = await rt.create_session()
        view = await chat(rt, sid, "go")
        [ask] = view["pending"]
        assert (ask["tool"], ask["arguments"]) == ("mcp__srv__record", {"text": "a"})
        await rt.respond(sid, [{"requestId": ask["requestId"], "approved": True}])
        view = await rt.drive(sid)
        [ask] = view["pending"]  # record again: approved once; add: always asks
        assert ask["tool"] == "mcp__srv__add"
        await rt.respond(sid, [{"requestId": ask["requestId"], "approved": False}])
        assert (await rt.drive(sid))["status"] == "waiting"
        return sid

    sid = asyncio.run(go())
    got = results(rt, sid)
    assert [g[0] for g in got[:2]] == ["mcp__srv__image", "mcp__srv__crash"]
    assert all(g[2] and g[1].startswith("Unknown tool") for g in got[:2])
    assert got[2:] == [
        ("mcp__srv__record", "recorded a", False),
        ("mcp__srv__record", "recorded b", False),
        ("mcp__srv__add", "The user denied this call.", True),
    ]
    assert not any(line.startswith("call crash") for line in calls(ctl))
    rt.close()


def test_variables_reach_the_server_but_never_the_store(
    tmp_path: Path, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl = tmp_path / "ctl"
    secret = "sk-test-" + os.urandom(8).hex()
    monkeypatch.setenv("EVE_TEST_SECRET", secret)
    (Path.cwd() / ".env").write_text("EVE_TEST_FLAG=from-dotenv\n")
    entry = stdio_entry(ctl)
    entry["args"] += ["--token", "${EVE_TEST_SECRET}", "${EVE_TEST_FLAG}", "${EVE_UNSET:-dflt}"]
    script = [reply("", call("mcp__srv__crash")), reply("ok")]
    data = tmp_path / "data"
    rt = Runtime(data_dir=data, agent_dir=mcp_agent(make_agent, script, {"srv": entry}))
    sid, _ = run(rt, "go")
    assert (ctl / "argv").read_text() == f"--token {secret} from-dotenv dflt"
    [(_, output, is_error)] = results(rt, sid)
    # The server printed its arguments before crashing: the error line hides the secret.
    assert is_error and "boom" in output and "***" in output and secret not in output
    rt.close()
    stored = b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file())
    assert secret.encode() not in stored and b"boom" in stored


def test_a_missing_variable_makes_the_server_unavailable(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    entry = {"command": "true", "env": {"TOKEN": "${EVE_NOT_SET_ANYWHERE}"}}
    script = [reply("", call("mcp__srv__add", a=1, b=1)), reply("ok")]
    rt = Runtime(agent_dir=mcp_agent(make_agent, script, {"srv": entry}), world=MemoryWorld())
    sid, _ = run(rt, "go")
    [(_, output, is_error)] = results(rt, sid)
    assert is_error and "${EVE_NOT_SET_ANYWHERE} is not set" in output
    rt.close()


def test_streamable_http_server_with_headers(
    tmp_path: Path, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl = tmp_path / "ctl"
    proc, url = start_http_server(ctl)
    procs = [proc]
    try:
        monkeypatch.setenv("EVE_TEST_TOKEN", "tok-123456")
        entry = {"url": url, "headers": {"Authorization": "Bearer ${EVE_TEST_TOKEN}"}}
        script = [
            reply("", call("mcp__web__add", a=20, b=22)),
            reply("ok"),
            reply("", call("mcp__web__add", a=1, b=2)),
            reply("ok again"),
        ]
        rt = Runtime(agent_dir=mcp_agent(make_agent, script, {"web": entry}), world=MemoryWorld())

        async def turns() -> str:
            sid = await rt.create_session()
            await chat(rt, sid, "go")
            # The remote server restarts between turns: the next turn reaches the new one.
            procs[0].kill()
            procs[0].communicate(timeout=10)
            procs.append(start_http_server(ctl, int(url.split(":")[2].split("/")[0]))[0])
            await chat(rt, sid, "again")
            return sid

        sid = asyncio.run(turns())
        assert results(rt, sid) == [("mcp__web__add", "42", False), ("mcp__web__add", "3", False)]
        assert set((ctl / "auth.log").read_text().splitlines()) == {"Bearer tok-123456"}
        assert calls(ctl)[f"call add {sid}:t1:call_0_0"] == 1
        rt.close()
    finally:
        for each in procs:
            each.kill()
            each.communicate(timeout=10)
