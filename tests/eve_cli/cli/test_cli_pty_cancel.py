"""Ctrl-C in `eve chat` at a real terminal: it stops a streaming reply now (the model server
sees the connection close), no tool call starts after it, and the cancel is durable (a
resume after Ctrl-C Ctrl-C runs nothing that was cancelled)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.eve_cli.cli.cli_helpers import (
    PROMPT,
    SCRIPT,
    TWO_TOOLS,
    Terminal,
    tool_results,
    wait_for,
)
from tests.eve_cli.slow_model import SlowModelServer


@pytest.fixture
def slow_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowModelServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    server = SlowModelServer(interval=0.1, seconds=60)
    try:
        yield server
    finally:
        server.stop()


def session_view(sid: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", "inspect", sid, "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    view: dict[str, object] = json.loads(done.stdout)
    return view


def test_ctrl_c_closes_a_streaming_reply_within_a_second(
    terminal: Callable[..., Terminal], slow_server: SlowModelServer
) -> None:
    env = {"OPENAI_BASE_URL": slow_server.url, "OPENAI_API_KEY": "test-key", "NO_PROXY": "*"}
    term = terminal("chat", "-m", "openai:slow", env=env)
    sid = term.out.expect(r"session\s+(\S+)").group(1)
    term.out.expect(PROMPT)
    term.type("tell me a long story\r")
    term.out.expect("word3")  # the reply is streaming
    pressed = time.monotonic()
    term.type("\x03")
    wait_for(lambda: slow_server.closed_at is not None, "the server to see the close", 10)
    assert slow_server.closed_at is not None
    assert slow_server.closed_at - pressed < 1.0
    assert not slow_server.finished
    term.out.expect("turn cancelled")
    term.out.expect(PROMPT)
    term.type("\x04")
    assert term.wait() == 0
    view = session_view(sid)
    turns = view["turns"]
    assert isinstance(turns, list) and turns[0]["status"] == "cancelled"
    assert slow_server.requests == 1


def test_ctrl_c_during_a_tool_stops_the_next_one_from_starting(
    terminal: Callable[..., Terminal], make_agent: Callable[..., Path]
) -> None:
    agent = make_agent(SCRIPT, TWO_TOOLS)
    term = terminal("chat", "--agent", str(agent))
    sid = term.out.expect(r"session\s+(\S+)").group(1)
    term.out.expect(PROMPT)
    term.type("go\r")
    wait_for(lambda: Path("first-started").exists(), "the first tool to start")
    term.type("\x03")
    term.out.expect("cancelling the turn")
    Path("release").write_text("")  # the tool in flight finishes
    term.out.expect("turn cancelled")
    term.out.expect(PROMPT)
    term.type("\x04")
    assert term.wait() == 0
    assert not Path("second-ran").exists()
    assert "never shown" not in term.out.text
    assert tool_results(sid) == [("first", "first done"), ("second", "The turn was cancelled.")]


def test_resume_after_ctrl_c_twice_runs_no_cancelled_work(
    terminal: Callable[..., Terminal], make_agent: Callable[..., Path]
) -> None:
    agent = make_agent(SCRIPT, TWO_TOOLS)
    term = terminal("chat", "--agent", str(agent))
    sid = term.out.expect(r"session\s+(\S+)").group(1)
    term.out.expect(PROMPT)
    term.type("go\r")
    wait_for(lambda: Path("first-started").exists(), "the first tool to start")
    term.type("\x03")
    term.out.expect("cancelling the turn")
    term.type("\x03")  # quit now, with the first tool still running
    assert term.wait() == 130
    Path("release").write_text("")
    resumed = subprocess.run(
        [sys.executable, "-m", "eve_cli", "resume", sid],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert Path("first-started").read_text() == "1"  # not run again
    assert not Path("second-ran").exists()
    view = session_view(sid)
    turns = view["turns"]
    assert isinstance(turns, list) and turns[0]["status"] == "cancelled"
    assert [name for name, _ in tool_results(sid)] == ["first", "second"]
    assert all(output == "The turn was cancelled." for _, output in tool_results(sid))


def test_ctrl_c_at_an_approval_prompt_cancels_the_turn_not_the_program(
    terminal: Callable[..., Terminal],
) -> None:
    term = terminal("chat")
    sid = term.out.expect(r"session\s+(\S+)").group(1)
    term.out.expect(PROMPT)
    term.type("remember to buy milk\r")
    term.out.expect(r"\[y\]es / \[n\]o / \[a\]lways")
    term.type("\x03")
    term.out.expect("turn cancelled")
    term.out.expect(PROMPT)
    term.type("what time is it?\r")  # the chat goes on
    term.out.expect(r"It is \d{4}-")
    term.out.expect(PROMPT)
    term.type("\x04")
    assert term.wait() == 0
    assert tool_results(sid)[0] == ("save_note", "The turn was cancelled.")
