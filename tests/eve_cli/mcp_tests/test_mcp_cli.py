"""MCP tools through the real commands: `eve chat -p` says an unavailable server in one line
on stderr (its name, what happened, the end of its stderr), no traceback, and the turn goes
on; `eve inspect` shows an MCP call with its server and tool, and the servers' start-up as a
line of its own, apart from the model call's time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.eve_cli.mcp_tests.mcp_support import alive, mcp_agent, pids, stdio_entry
from tests.eve_cli.rt_support import AgentFactory, call, reply


def eve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", *args], capture_output=True, text=True, timeout=60
    )


def test_chat_and_inspect_with_mcp_servers(tmp_path: Path, make_agent: AgentFactory) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    bad.mkdir()
    (bad / "fail-start").write_text("")
    script = [reply("", call("mcp__good__add", a=20, b=22)), reply("the answer is 42")]
    agent = mcp_agent(make_agent, script, {"good": stdio_entry(good), "bad": stdio_entry(bad)})

    chat = eve("chat", "--agent", str(agent), "-p", "add them")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip().endswith("the answer is 42")
    lines = [line for line in chat.stderr.splitlines() if "MCP server 'bad'" in line]
    assert lines == [
        "MCP server 'bad' failed to start: exited with code 2; stderr: starting | "
        "cannot open the database: permission denied"
    ], chat.stderr
    assert "Traceback" not in chat.stderr
    assert not any(alive(p) for p in pids(good))  # stopped with eve

    listing = json.loads(eve("inspect", "--json").stdout)
    sid = listing["sessions"][0]["id"] if isinstance(listing, dict) else listing[0]["id"]
    tree = eve("inspect", sid)
    assert tree.returncode == 0, tree.stderr
    assert "tool mcp__good__add(a=20, b=22)  completed  MCP good/add" in tree.stdout
    lines = tree.stdout.splitlines()
    [started] = [n for n, line in enumerate(lines) if "MCP start-up  completed" in line]
    assert "good, bad: 6 tools" in lines[started]  # those listed (`bad` did not start)
    assert "model call" in lines[started + 1]  # of the same step, after its start-up
    view = json.loads(eve("inspect", sid, "--json").stdout)
    [first, second] = view["turns"][0]["steps"]
    mcp, model, _ = first["actions"]
    assert (mcp["kind"], mcp["servers"], model["kind"]) == ("mcp", ["good", "bad"], "model")
    assert [a["kind"] for a in second["actions"]] == ["model"]  # started once a turn
    # The servers' start (a process importing the MCP SDK) is not the model call's time.
    assert model["durationMs"] < mcp["durationMs"] <= first["durationMs"]
