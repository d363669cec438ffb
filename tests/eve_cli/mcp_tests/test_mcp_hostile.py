"""A hostile MCP server (`hostile_server.py`, a real process speaking raw JSON-RPC on stdio):
its own errors (JSON-RPC error objects, -32000 included, and ``isError`` results) are told
from a dead connection, garbage on stdout and text that is not valid Unicode do not break
the connection, a call that hangs discards that server only, a server that exits mid-call is
started again, and one that never answers ``initialize`` costs one bounded wait, one line."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eve_cli.runtime import Runtime
from eve_cli.testing import chat
from tests.eve_cli.mcp_tests.mcp_support import alive, eventually, free_port
from tests.eve_cli.rt_support import AgentFactory, call, reply
from world import MemoryWorld

SERVER = Path(__file__).resolve().parent / "hostile_server.py"


def _agent(make_agent: AgentFactory, ctl: Path, calls: list[tuple[str, dict[str, Any]]],
           **entry: Any) -> Path:  # fmt: skip
    script = []
    for name, arguments in calls:
        script += [reply("", call(f"mcp__h__{name}", **arguments)), reply(f"after {name}")]
    folder = make_agent(script=script)
    ctl.mkdir(exist_ok=True)
    server = {"command": sys.executable, "args": [str(SERVER), str(ctl)], **entry}
    (folder / "mcp.json").write_text(json.dumps({"mcpServers": {"h": server}}))
    return folder


def _results(rt: Runtime, sid: str) -> list[tuple[str, bool]]:
    return [(e["output"], e["isError"]) for e in rt.events(sid) if e["type"] == "action.result"]


def _pids(ctl: Path) -> list[int]:
    return [int(p) for p in (ctl / "pids").read_text().split()]


def test_errors_garbage_and_bad_text_keep_the_server(
    tmp_path: Path, make_agent: AgentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    ctl = tmp_path / "ctl"
    names = ["echo", "error32000", "error", "iserror", "garbage", "surrogate", "echo"]
    agent = _agent(make_agent, ctl, [(n, {"text": "x"}) for n in names])
    rt = Runtime(agent_dir=agent, world=MemoryWorld())

    async def main() -> str:
        sid = await rt.create_session()
        for _ in names:
            assert (await chat(rt, sid, "go"))["status"] == "waiting"
        return sid

    with caplog.at_level(logging.WARNING, logger="eve_cli"):
        sid = asyncio.run(main())
    [pid] = _pids(ctl)  # one process served every call: no error was taken for a dead server
    assert _results(rt, sid) == [
        (f"{pid} x", False),
        ("MCP server 'h' refused 'mcp__h__error32000': quota exceeded for today", True),
        ("MCP server 'h' refused 'mcp__h__error': the index is rebuilding", True),
        ("no such file: notes.txt", True),
        ("after the garbage", False),
        ("a\ufffdb", False),
        (f"{pid} x", False),
    ]
    assert any("MCP server 'h' sent text that is not valid Unicode" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    rt.close()


def test_a_hung_call_discards_its_server_and_a_dead_one_is_started_again(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    ctl = tmp_path / "ctl"
    agent = _agent(make_agent, ctl, [("hang", {}), ("echo", {"text": "a"}), ("exit", {}),
                                     ("echo", {"text": "b"})],
                   timeout={"*": 30, "hang": 1})  # fmt: skip
    rt = Runtime(agent_dir=agent, world=MemoryWorld())

    async def main() -> str:
        sid = await rt.create_session()
        for _ in range(4):
            assert (await chat(rt, sid, "go"))["status"] == "waiting"
        return sid

    sid = asyncio.run(main())
    first, second, third = _pids(ctl)
    assert _results(rt, sid) == [
        ("MCP server 'h' did not answer a call of 'mcp__h__hang' within 1 s", True),
        (f"{second} a", False),  # a fresh server: the hung one is not asked again
        ("MCP server 'h' failed during a call of 'mcp__h__exit': exited with code 3; "
         "stderr: going away mid-call", True),
        (f"{third} b", False),
    ]  # fmt: skip
    assert eventually(lambda: not alive(first))
    rt.close()


def test_a_timeout_leaves_other_calls_on_that_server_to_finish(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    ctl = tmp_path / "ctl"
    hang = make_agent(script=[reply("", call("mcp__h__hang")), reply("done")])
    slow = make_agent(script=[reply("", call("mcp__h__slow", seconds=3)), reply("done")])
    server = {"command": sys.executable, "args": [str(SERVER), str(ctl)],
              "timeout": {"*": 60, "hang": 1}}  # fmt: skip
    ctl.mkdir()
    for folder in (hang, slow):
        (folder / "mcp.json").write_text(json.dumps({"mcpServers": {"h": server}}))
    world = MemoryWorld()
    rt_hang, rt_slow = Runtime(agent_dir=hang, world=world), Runtime(agent_dir=slow, world=world)

    async def main() -> tuple[str, str]:
        a, b = await rt_hang.create_session(), await rt_slow.create_session()
        await asyncio.gather(chat(rt_hang, a, "go"), chat(rt_slow, b, "go"))
        return a, b

    a, b = asyncio.run(main())
    assert _results(rt_hang, a) == [
        ("MCP server 'h' did not answer a call of 'mcp__h__hang' within 1 s", True)
    ]
    [(output, is_error)] = _results(rt_slow, b)
    assert output.endswith(" slow") and not is_error, output
    rt_hang.close()
    rt_slow.close()


def test_a_server_that_never_initializes_is_one_bounded_line(
    tmp_path: Path, make_agent: AgentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    ctl = tmp_path / "ctl"
    agent = _agent(make_agent, ctl, [("echo", {"text": "x"})], startTimeout=1)
    (ctl / "mute").touch()
    rt = Runtime(agent_dir=agent, world=MemoryWorld())

    async def main() -> str:
        sid = await rt.create_session()
        assert (await chat(rt, sid, "go"))["status"] == "waiting"
        return sid

    with caplog.at_level(logging.WARNING):
        sid = asyncio.run(main())
        rt.close()
        gc.collect()  # a future whose exception nobody read is reported when collected
    line = (
        "MCP server 'h' did not start within 1 s (it never answered initialize; a slow server "
        'can be given more with "startTimeout" in mcp.json)'
    )
    assert _results(rt, sid) == [(line, True)]
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.records
    assert eventually(lambda: not any(alive(pid) for pid in _pids(ctl)))


def _init(rid: int) -> str:
    params = {"protocolVersion": "2025-06-18", "capabilities": {},
              "clientInfo": {"name": "raw", "version": "1"}}  # fmt: skip
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params})


def _call(rid: int, **arguments: Any) -> str:
    params = {"name": "agent_start", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})


def test_eve_mcp_answers_every_request_it_cannot_serve(
    make_agent: AgentFactory, tmp_path: Path
) -> None:
    """A raw client of `eve mcp` (a real process): each bad line gets a JSON-RPC error at once,
    in order, and the server goes on serving."""
    agent = make_agent(script=[reply("fine")])
    deep = '{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"x": ' + "[" * 100_000
    lines = [
        _init(1),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        _call(2, message="a\ud800b"),  # json.dumps: the escape \ud800
        "this is not JSON",
        deep + "]" * 100_000 + "}}",
        json.dumps({"jsonrpc": "2.0", "id": 5, "method": 7}),
        json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", "--data", str(tmp_path / "data"), "mcp", "--agent",
         str(agent)],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a.get("id") for a in answers] == [1, 2, None, None, 5, 6], done.stdout
    codes = [a["error"]["code"] for a in answers[1:5]]
    assert codes == [-32602, -32700, -32700, -32600]
    assert "message is not valid Unicode: a lone surrogate U+D800" in answers[1]["error"]["message"]
    assert answers[3]["error"]["message"] == "Parse error: JSON nested too deeply"
    assert len(answers[5]["result"]["tools"]) == 5
    assert "Traceback" not in done.stderr, done.stderr
    assert not list((tmp_path / "data").glob("runs/*")), "a session was created"


def test_an_http_server_s_unparsable_answer_is_one_line(
    tmp_path: Path, make_agent: AgentFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Over Streamable HTTP the SDK refuses a lone surrogate escape itself: the call's result
    is that refusal in one line (no traceback logged), and the next call is served."""
    port = free_port()
    server = subprocess.Popen([sys.executable, str(SERVER), str(tmp_path), "--http", str(port)])
    try:
        assert eventually(lambda: _listening(port)), "the HTTP test server did not start"
        script = [reply("", call("mcp__h__surrogate")), reply("a"), reply("", call("mcp__h__echo")),
                  reply("b")]  # fmt: skip
        folder = make_agent(script=script)
        entry = {"url": f"http://127.0.0.1:{port}/mcp"}
        (folder / "mcp.json").write_text(json.dumps({"mcpServers": {"h": entry}}))
        rt = Runtime(agent_dir=folder, world=MemoryWorld())

        async def main() -> str:
            sid = await rt.create_session()
            for _ in range(2):
                assert (await chat(rt, sid, "go"))["status"] == "waiting"
            return sid

        with caplog.at_level(logging.WARNING):
            sid = asyncio.run(main())
        rt.close()
    finally:
        server.kill()
        server.wait()
    (refused, is_error), (echoed, ok) = _results(rt, sid)
    assert is_error and "\n" not in refused and "Invalid JSON" in refused, refused
    assert refused.startswith("MCP server 'h' refused 'mcp__h__surrogate': Failed to parse")
    assert echoed == f"{server.pid} x" and not ok
    assert not [r for r in caplog.records if r.exc_info], caplog.records


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
