"""`eve chat --url URL`: the chat command attached to a running `eve start`, behaving as it does
in-process (replies, approvals with --approve, exit 3 when nobody can approve)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
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


def chat(url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", "chat", "--url", url, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )


def test_chat_through_a_running_server(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    script = write_script(
        tmp_path / "s.json",
        [reply("first reply"), call("gate"), reply("through the gate"), reply("bye")],
    )
    server = eve_process(
        "start", "--port", "0", "--agent", str(write_agent(tmp_path / "a", script, TOOLS))
    )
    done = chat(server.url, "-p", "hello")
    assert done.returncode == 0, done.stderr
    assert "first reply" in done.stdout

    # Lines from stdin, one turn each; the approval is given by --approve all.
    sid = httpx.get(f"{server.url}/eve/v1/sessions", timeout=WAIT).json()["sessions"][0]["id"]
    done = chat(server.url, "-s", sid, "--approve", "all", stdin="open it\nthanks\n")
    assert done.returncode == 0, done.stderr
    assert "through the gate" in done.stdout and "bye" in done.stdout
    view = httpx.get(f"{server.url}/eve/v1/session/{sid}", timeout=WAIT).json()
    assert view["status"] == "waiting" and len(view["turns"]) == 3


def test_chat_waiting_for_an_approval_nobody_gives_exits_3(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.json", [call("gate"), reply("never")])
    server = eve_process(
        "start", "--port", "0", "--agent", str(write_agent(tmp_path / "a", script, TOOLS))
    )
    done = chat(server.url, "-p", "open it")
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "approval" in done.stderr and "gate" in done.stderr


def test_chat_with_a_wrong_token_is_one_error_line(
    eve_process: Callable[..., EveProcess],
) -> None:
    server = eve_process("start", "--port", "0", "--token", "right")
    done = chat(server.url, "--token", "wrong", "-p", "hi")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bearer token" in lines[0] and "Traceback" not in done.stderr
