"""`eve chat` as a real process: pipes, NDJSON, one-shot, exit 3, and kill -9 recovery."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.eve_cli.cli.cli_helpers import SLOW_TOOL, EveProc, Reader, chat_in_slow_tool, json_lines


def test_piped_stdin_delivers_each_line_after_the_previous_turn_settled(eve_proc: EveProc) -> None:
    result = eve_proc("chat", "--json", input="hello\nwhat time is it?\ncount the words in a b\n")
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    received = [i for i, e in enumerate(events) if e["type"] == "message.received"]
    settled = [i for i, e in enumerate(events) if e["type"] == "turn.completed"]
    assert len(received) == len(settled) == 3
    # Each message arrives only after the previous turn completed: no steering.
    assert received[1] > settled[0] and received[2] > settled[1]
    assert [events[i]["text"] for i in received] == [
        "hello",
        "what time is it?",
        "count the words in a b",
    ]


def test_the_session_id_is_out_before_the_first_message_is_read() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "chat", "--json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            reader = Reader(proc.stdout.fileno())
            first = json.loads(reader.expect(r"\{[^\n]*\}\n").group(0))  # nothing typed yet
            assert first["type"] == "session.started"
            proc.stdin.write(b"hello\n")
            proc.stdin.close()
            events = json_lines(reader.read_all())
            assert proc.wait(timeout=60) == 0
        finally:
            proc.kill()
    assert {e["sessionId"] for e in events} == {first["sessionId"]}
    assert [e["text"] for e in events if e["type"] == "message.received"] == ["hello"]


def test_plain_pipe_and_print_mode(eve_proc: EveProc) -> None:
    piped = eve_proc("chat", input="count the words in one two three\n")
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "That text has 3 words.\n"
    once = eve_proc("chat", "-p", "count the words in one two")
    assert once.returncode == 0, once.stderr
    assert once.stdout == "That text has 2 words.\n"


def test_exit_3_on_a_pending_approval_keeps_the_session_parked(eve_proc: EveProc) -> None:
    result = eve_proc("chat", "--json", input="remember to buy milk\nwhat time is it?\n")
    assert result.returncode == 3
    events = json_lines(result.stdout)
    sid = events[0]["sessionId"]
    assert events[-1]["type"] in ("turn.waiting", "session.waiting", "input.requested")
    assert f"session {sid} is waiting for approval to run save_note" in result.stderr
    assert "eve chat -s" in result.stderr
    # The second line was not delivered: the turn is still parked.
    assert [e["text"] for e in events if e["type"] == "message.received"] == [
        "remember to buy milk"
    ]
    view = json.loads(eve_proc("inspect", sid, "--json").stdout)
    assert view["status"] == "parked"
    assert view["parkedOn"] == "approval"


def test_session_option_finishes_a_turn_interrupted_by_kill_9(
    eve_proc: EveProc, make_agent: Callable[..., Path], isolated: Path
) -> None:
    agent = make_agent(
        [
            {"text": "", "tool_calls": [{"name": "slow", "arguments": {}}]},
            {"text": "finished after the crash"},
        ],
        SLOW_TOOL,
    )
    with chat_in_slow_tool(agent) as sid:
        pass  # killed with SIGKILL in the middle of the tool
    assert (isolated / "slow-started").read_text() == "1"
    # No --agent: the session remembers its agent folder.
    result = eve_proc("chat", "-s", sid, input="")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "finished after the crash\n"
    assert (isolated / "slow-started").read_text() == "2"  # the interrupted call ran again once
    view = json.loads(eve_proc("inspect", sid, "--json").stdout)
    assert view["status"] == "waiting"
    assert [t["status"] for t in view["turns"]] == ["completed"]
