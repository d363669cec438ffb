"""D1/D2 for MCP calls, with a real stdio MCP server and a real eve process killed with
SIGKILL in the middle of a call, on every world other processes can open: the completed call
is never repeated, the call in flight is issued again once with the same idempotency key, and
no server process outlives the killed eve."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.mcp_tests.mcp_support import (
    alive,
    calls,
    eventually,
    mcp_agent,
    pids,
    stdio_entry,
)
from tests.eve_cli.rt_support import DRIVER, AgentFactory, call, reply

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

SCRIPT = [
    reply("", call("mcp__srv__add", a=2, b=3), call("mcp__srv__record", text="x")),
    reply("", call("ask_question", question="Go on?")),
    reply("done"),
]


def drive(data: str, agent: Path, sid: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, data, str(agent), "drive", sid],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_kill_9_during_an_mcp_call_resumes_without_repeating_the_completed_one(
    tmp_path: Path, make_agent: AgentFactory, world_spec: str
) -> None:
    """Process 1 is killed in the middle of the second call; process 2 resumes the turn and
    parks on a question; process 3, after the answer, replays both calls from the journal
    and finishes."""
    ctl = tmp_path / "ctl"
    agent = mcp_agent(make_agent, SCRIPT, {"srv": stdio_entry(ctl)})
    rt = Runtime(data_dir=world_spec, agent_dir=agent)
    sid = asyncio.run(rt.create_session())
    asyncio.run(rt.deliver(sid, "go"))
    (ctl / "stall").write_text("")

    first = drive(world_spec, agent, sid)
    assert eventually(lambda: (ctl / "stalled").exists()), first.communicate(timeout=5)
    server = int((ctl / "stalled").read_text())
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=10)
    # No orphan: the server eve started dies with it, though it ignores its stdin's end.
    assert eventually(lambda: not any(alive(p) for p in pids(ctl)), 5), pids(ctl)
    assert not alive(server)

    out, err = drive(world_spec, agent, sid).communicate(timeout=60)
    assert out.splitlines()[-1] == "VIEW parked", (out, err)
    [request] = rt.session(sid)["pending"]
    asyncio.run(rt.respond(sid, [{"requestId": request["requestId"], "answer": "yes"}]))
    out, err = drive(world_spec, agent, sid).communicate(timeout=60)
    assert out.splitlines()[-1] == "VIEW waiting", (out, err)

    add_key, record_key = f"{sid}:t1:call_0_0", f"{sid}:t1:call_0_1"
    assert calls(ctl) == {
        f"call add {add_key}": 1,  # D1/D2: completed before the kill, never sent again
        f"done add {add_key}": 1,
        f"call record {record_key}": 2,  # in flight at the kill: sent again once, same key
        f"done record {record_key}": 1,
    }
    tools = [m["content"] for m in rt.history(sid) if m["role"] == "tool"]
    assert tools == ["5", "recorded x", "yes"]
    results = [e for e in rt.events(sid) if e["type"] == "action.result"]
    assert [(e.get("server"), e.get("tool"), e["isError"]) for e in results] == [
        ("srv", "add", False),
        ("srv", "record", False),
        (None, None, False),
    ]
    rt.close()
    # One server per process (each for its live model call's tool list), none left running.
    assert len(pids(ctl)) == 3 and not any(alive(p) for p in pids(ctl))
