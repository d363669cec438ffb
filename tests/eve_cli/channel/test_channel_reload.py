"""`eve dev`: a saved tool change applies at the next turn of a parked session; a broken edit
keeps the last good definition serving and names file and line."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    of_type,
    output_of,
    read_events,
    reply,
    stream_length,
    write_agent,
    write_script,
)

API = "/eve/v1"

TOOLS = """
from eve_cli import always, tool

@tool(approval=always())
def gate() -> str:
    \"\"\"Needs approval: parks the turn.\"\"\"
    return "gate open"

@tool
def stamp() -> str:
    \"\"\"Which version of this file is loaded.\"\"\"
    return "stamp {version}"
"""


def results(events: list[dict[str, Any]], name: str) -> list[str]:
    return [output_of(e) for e in events if e["type"] == "action.result" and e.get("name") == name]


def test_edit_while_parked_applies_at_the_next_turn(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    script = write_script(
        tmp_path / "s.json",
        [call("gate"), reply("turn one done"), call("stamp"), reply("turn two done")],
    )
    agent = write_agent(tmp_path / "agent", script, TOOLS.format(version="v1"))
    server = eve_process("dev", "--port", "0", "--agent", str(agent))
    server.stderr_until("watching")
    sid = httpx.post(f"{server.url}{API}/session", json={"message": "1"}, timeout=WAIT).json()[
        "sessionId"
    ]
    parked = read_events(server.url, sid, of_type("turn.waiting"))
    request = next(e for e in parked if e["type"] == "input.requested")

    (agent / "tools" / "main.py").write_text(textwrap.dedent(TOOLS.format(version="v2")))
    line = server.stderr_until("reloaded agent")
    assert "main.py" in line

    answer = {"inputResponses": [{"requestId": request["requestId"], "approved": True}]}
    assert (
        httpx.post(f"{server.url}{API}/session/{sid}", json=answer, timeout=WAIT).status_code == 202
    )
    read_events(server.url, sid, of_type("turn.completed"), start=parked[-1]["index"] + 1)
    start = stream_length(server.url, sid)
    httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "2"}, timeout=WAIT)
    events = read_events(server.url, sid, of_type("turn.completed"), start=start)
    assert results(events, "stamp") == ["stamp v2"]


def test_broken_edit_keeps_serving_the_last_good_agent(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.json", [call("stamp"), reply("done")])
    agent = write_agent(tmp_path / "agent", script, TOOLS.format(version="v1"))
    server = eve_process("dev", "--port", "0", "--agent", str(agent))
    server.stderr_until("watching")
    (agent / "tools" / "main.py").write_text("from eve_cli import tool\n\ndef broken(:\n")
    line = server.stderr_until("reload failed")
    assert "main.py:3" in line and "last good" in line
    sid = httpx.post(f"{server.url}{API}/session", json={"message": "go"}, timeout=WAIT).json()[
        "sessionId"
    ]
    events = read_events(server.url, sid, of_type("turn.completed", "turn.failed"))
    assert events[-1]["type"] == "turn.completed"
    assert results(events, "stamp") == ["stamp v1"]
    assert httpx.get(f"{server.url}{API}/health", timeout=WAIT).json() == {"ok": True}
