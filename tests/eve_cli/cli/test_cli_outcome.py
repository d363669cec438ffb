"""`eve chat` answers an interrupted call's "outcome unknown" request: a script by
`--unknown rerun|failed` (without it: exit 3 saying how), a terminal by a prompt (a real
pseudo-terminal)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from eve_cli.harness._effects import TREATED_AS_FAILED
from tests.eve_cli.cli.cli_helpers import PROMPT, Eve, Terminal, data_dir
from tests.eve_cli.effects_support import parked_case


def test_without_a_flag_exits_3_then_unknown_failed_settles_it(eve: Eve, tmp_path: Path) -> None:
    case = parked_case(tmp_path / "case", str(data_dir()), amount=3)
    first = eve("chat", "-s", case.sid, input="")
    assert first.exit_code == 3, first.output
    assert "charge(amount=3)" in first.stderr and "--unknown rerun" in first.stderr
    done = eve("chat", "-s", case.sid, "--unknown", "failed", input="")
    assert done.exit_code == 0, done.output
    assert "--unknown failed" in done.stderr
    message = case.tool_message()
    assert (message["content"], message["is_error"]) == (TREATED_AS_FAILED, True)
    assert case.runs()["charge 3"] == 1


def test_unknown_rerun_runs_the_call_again(eve: Eve, tmp_path: Path) -> None:
    case = parked_case(tmp_path / "case", str(data_dir()), amount=4)
    done = eve("chat", "-s", case.sid, "--unknown", "rerun", input="")
    assert done.exit_code == 0, done.output
    assert case.runs()["charge 4"] == 2 and case.tool_message()["content"] == "charged 4"


def test_a_terminal_asks_what_became_of_the_call(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    case = parked_case(tmp_path / "case", str(data_dir()), amount=6)
    term = terminal("chat", "-s", case.sid)
    term.out.expect(r"\[r\]un again / treat as \[f\]ailed / \[g\]ive the result")
    term.type("g\r")
    term.out.expect("result: ")
    term.type("charged 6 by hand\r")
    term.out.expect("result given: charged 6 by hand")
    term.out.expect(PROMPT)
    assert case.tool_message()["content"] == "charged 6 by hand"
    assert case.runs()["charge 6"] == 1
