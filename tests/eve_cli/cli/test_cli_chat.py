"""`eve chat` in-process (CliRunner: stdin is not a terminal, so output is plain)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.eve_cli.cli.cli_helpers import Eve, data_dir, json_lines


def session_of(stderr: str) -> str:
    match = re.search(r"session (\S+) is waiting", stderr)
    assert match, stderr
    return match.group(1)


def test_print_mode_prints_only_the_final_reply(eve: Eve) -> None:
    result = eve("chat", "-p", "what time is it?")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"It is \d{4}-\d\d-\d\dT[\d:]+\+00:00 \(UTC\)\.", lines[0])


def test_piped_lines_are_one_message_each(eve: Eve) -> None:
    result = eve("chat", input="hello\n\nwhat time is it?\n")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith('You said: "hello".')
    assert lines[1].startswith("It is ")


def test_json_writes_every_event_with_the_session_id_first(eve: Eve) -> None:
    result = eve("chat", "--json", input="what time is it?\n")
    assert result.exit_code == 0, result.output
    events = json_lines(result.stdout)
    assert events[0]["type"] == "session.started"
    sid = events[0]["sessionId"]
    assert all(e["sessionId"] == sid for e in events)
    assert [e["index"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    for kind in ("turn.started", "message.received", "actions.requested", "action.result"):
        assert kind in types
    assert types.index("turn.completed") > types.index("action.result")
    texts = [e["text"] for e in events if e["type"] == "message.completed"]
    assert texts[-1].startswith("It is ")


def test_pending_approval_without_a_terminal_exits_3_then_approve_all_finishes(eve: Eve) -> None:
    result = eve("chat", input="remember to buy milk\n")
    assert result.exit_code == 3
    assert "waiting for approval to run save_note(" in result.stderr
    assert "--approve all" in result.stderr
    sid = session_of(result.stderr)
    view = eve("inspect", sid, "--json")
    assert '"status":"parked"' in view.stdout
    done = eve("chat", "-s", sid, "--approve", "all", input="")
    assert done.exit_code == 0, done.output
    assert "saved note 1: buy milk" in done.stdout


def test_approve_none_denies(eve: Eve) -> None:
    result = eve("chat", "--approve", "none", "-p", "remember to buy milk")
    assert result.exit_code == 0, result.output
    assert "save_note did not work" in result.stdout
    assert '--approve none: approval to run save_note(text="buy milk"): denied' in result.stderr


def test_pending_question_exits_3_and_the_next_piped_line_answers_it(eve: Eve) -> None:
    result = eve("chat", input="ask me a question\n")
    assert result.exit_code == 3
    assert "question: What is your favourite colour?" in result.stderr
    assert "echo 'YOUR ANSWER' | eve chat -s" in result.stderr
    sid = session_of(result.stderr)
    answered = eve("chat", "-s", sid, input="blue\n")
    assert answered.exit_code == 0, answered.output
    assert "You answered: blue" in answered.stdout


def test_continue_uses_the_latest_session(eve: Eve) -> None:
    first = eve("chat", "--json", "-p", "hello")
    sid = json_lines(first.stdout)[0]["sessionId"]
    again = eve("chat", "-c", "--json", "-p", "what time is it?")
    assert again.exit_code == 0, again.output
    events = json_lines(again.stdout)
    assert {e["sessionId"] for e in events} == {sid}
    assert events[0]["index"] > 0  # only events from now on
    listing = eve("inspect", "--json")
    assert listing.stdout.count('"id"') == 1


def test_continue_without_sessions_is_an_error(eve: Eve) -> None:
    result = eve("chat", "-c", "-p", "hi")
    assert result.exit_code == 1
    assert result.stderr.startswith("eve: error: no session to continue in")


def test_unknown_session_and_conflicting_options(eve: Eve) -> None:
    unknown = eve("chat", "-s", "nope", "-p", "hi")
    assert unknown.exit_code == 1
    assert "no session nope" in unknown.stderr
    both = eve("chat", "-c", "-s", "x")
    assert both.exit_code == 2
    assert "use one of -c/--continue, -s/--session and -r/--resume" in both.stderr


def test_model_option_uses_a_scripted_model(eve: Eve, tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text('[{"text": "scripted hello"}]')
    result = eve("chat", "-m", f"scripted:{script}", "-p", "hi")
    assert result.exit_code == 0, result.output
    assert result.stdout == "scripted hello\n"


def test_unknown_model_is_one_clear_line(eve: Eve) -> None:
    result = eve("chat", "-m", "nonsense", "-p", "hi")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "unknown model 'nonsense'" in result.stderr


def test_init_folder_is_ready_for_chat(eve: Eve, isolated: Path) -> None:
    assert eve("init", "mine").exit_code == 0
    result = eve(
        "chat", "--agent", "mine", "--approve", "all",
        input="count the words in the quick brown fox\nremember to water the plants\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "That text has 4 words." in result.stdout
    notes = list((isolated / "notes").glob("*.md"))
    assert [n.read_text() for n in notes] == ["water the plants\n"]


def test_missing_and_broken_agent_folders(eve: Eve, isolated: Path) -> None:
    missing = eve("chat", "--agent", "nowhere", "-p", "hi")
    assert missing.exit_code == 1
    assert "agent folder nowhere does not exist" in missing.stderr
    broken = isolated / "broken"
    broken.mkdir()
    (broken / "agent.py").write_text("from eve_cli import define_agent\nagent = define_agent(\n")
    result = eve("chat", "--agent", "broken", "-p", "hi")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "agent.py:" in result.stderr
    assert "Traceback" not in result.output


def test_data_option_creates_the_directory(eve: Eve, tmp_path: Path) -> None:
    target = tmp_path / "deep" / "data"
    result = eve("chat", "--data", str(target), "-p", "hello")
    assert result.exit_code == 0, result.output
    assert target.is_dir() and any(target.iterdir())
    assert not data_dir().exists()
    same = eve("--data", str(target), "inspect", "--json")
    assert same.stdout.count('"id"') == 1


def test_slash_commands_in_piped_mode(eve: Eve) -> None:
    lines = "hello\n/help\n/sessions\n/compact\n/clear\n/cancel\n/bogus\n/exit\nhi\n"
    result = eve("chat", "--json", input=lines)
    assert result.exit_code == 0, result.output
    types = [e["type"] for e in json_lines(result.stdout)]
    assert "compaction.completed" in types
    assert types.index("context.cleared") > types.index("compaction.completed")
    assert types.count("turn.started") == 1  # /exit stopped before "hi"
    assert "commands: /help /exit /clear /compact /cancel /sessions" in result.stderr
    assert "unknown command /bogus" in result.stderr


def test_a_failed_turn_exits_1_in_plain_mode(eve: Eve, make_agent: Callable[..., Path]) -> None:
    agent = make_agent([{"text": "only one answer"}])
    result = eve("chat", "--agent", str(agent), input="one\ntwo\n")
    assert result.exit_code == 1
    assert result.stdout == "only one answer\n"
    assert "eve: error:" in result.stderr
    assert "script" in result.stderr
