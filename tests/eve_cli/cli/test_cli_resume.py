"""`eve resume`: drive interrupted sessions to their next wait point."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.eve_cli.cli.cli_helpers import SLOW_TOOL, Eve, EveProc, chat_in_slow_tool, json_lines


def test_resume_needs_a_session_or_all(eve: Eve) -> None:
    assert eve("resume").exit_code == 2
    assert eve("resume", "s_x", "--all").exit_code == 2


def test_nothing_to_resume_and_an_idle_session(eve: Eve) -> None:
    nothing = eve("resume", "--all")
    assert nothing.exit_code == 0
    assert "nothing to resume" in nothing.stdout
    sid = json_lines(eve("chat", "--json", "-p", "hello").stdout)[0]["sessionId"]
    idle = eve("resume", sid)
    assert idle.exit_code == 0, idle.output
    assert idle.stdout == f"{sid}: waiting for the next message\n"
    assert eve("resume", "s_unknown").exit_code == 1


def test_resume_all_finishes_a_turn_interrupted_by_kill_9(
    eve_proc: EveProc, make_agent: Callable[..., Path], isolated: Path
) -> None:
    agent = make_agent(
        [{"text": "", "tool_calls": [{"name": "slow", "arguments": {}}]}, {"text": "all done"}],
        SLOW_TOOL,
    )
    with chat_in_slow_tool(agent) as sid:
        pass  # killed with SIGKILL in the middle of the tool
    result = eve_proc("resume", "--all")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{sid}: waiting for the next message\n"
    view = json.loads(eve_proc("inspect", sid, "--json").stdout)
    assert view["turns"][0]["status"] == "completed"
    assert view["turns"][0]["steps"][-1]["actions"][0]["text"] == "all done"
    assert (isolated / "slow-started").read_text() == "2"


def test_resume_reports_a_parked_session(eve: Eve) -> None:
    result = eve("chat", "--json", input="remember to buy milk\n")
    sid = json_lines(result.stdout)[0]["sessionId"]
    resumed = eve("resume", sid)
    assert resumed.exit_code == 0
    assert resumed.stdout.startswith(f"{sid}: parked, waiting for approval to run save_note(")
