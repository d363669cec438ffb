"""`eve log`: a session's transcript (plain at a pipe, `--json`), the latest by default; and
what a person sees of sessions: `interrupted` vs `running`, empty sessions left out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.eve_cli.cli.cli_helpers import SLOW_TOOL, EveProc, chat_in_slow_tool


def test_log_prints_the_latest_session_as_a_transcript(eve_proc: EveProc) -> None:
    older = eve_proc("chat", "-p", "count the words in a b c")
    assert older.returncode == 0, older.stderr
    chat = eve_proc("chat", "--approve", "all", input="what time is it?\nremember to buy milk\n")
    assert chat.returncode == 0, chat.stderr
    shown = eve_proc("log")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "› what time is it?" in lines
    assert any(line.startswith("✓ get_current_time() → ") for line in lines)
    assert any(line.startswith("It is ") for line in lines)
    assert '⏸ waiting: approval to run save_note(text="buy milk")' in lines
    assert "approved" in lines
    assert any(line.startswith('✓ save_note(text="buy milk") → saved note 1') for line in lines)
    assert "count the words" not in shown.stdout  # the older session is not the latest


def test_log_of_a_given_session_as_json_and_the_last_exchanges(eve_proc: EveProc) -> None:
    first = eve_proc("chat", "--json", input="count the words in a b c\nwhat time is it?\n")
    sid = json.loads(first.stdout.splitlines()[0])["sessionId"]
    eve_proc("chat", "-p", "a later session")
    document = json.loads(eve_proc("log", sid, "--json").stdout)
    assert document["sessionId"] == sid
    roles = [entry["role"] for entry in document["entries"]]
    assert roles[0] == "user" and "tool" in roles and roles[-1] == "assistant"
    said = [e["text"] for e in document["entries"] if e["role"] == "user"]
    assert said == ["count the words in a b c", "what time is it?"]
    last = eve_proc("log", sid, "--last", "1")
    assert "count the words" not in last.stdout
    assert "(1 earlier exchanges not shown)" in last.stdout
    assert "› what time is it?" in last.stdout


def test_log_of_an_unknown_session_is_one_clear_line(eve_proc: EveProc) -> None:
    eve_proc("chat", "-p", "hello")
    missing = eve_proc("log", "s_nosuchsession")
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and "s_nosuchsession" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_long_reply_is_whole_in_the_log_and_the_inspect_step(
    eve_proc: EveProc, make_agent: Callable[..., Path]
) -> None:
    long_text = " ".join(f"word{i}" for i in range(400))
    agent = make_agent([{"text": long_text}])
    chat = eve_proc("chat", "--agent", str(agent), "--json", "-p", "go")
    sid = json.loads(chat.stdout.splitlines()[0])["sessionId"]
    assert long_text in eve_proc("log", sid).stdout
    step = eve_proc("inspect", sid, "--step", "1.0")
    assert step.returncode == 0, step.stderr
    assert "word399" in step.stdout


def test_a_session_whose_process_died_is_interrupted_with_the_resume_command(
    eve_proc: EveProc, make_agent: Callable[..., Path]
) -> None:
    agent = make_agent([{"text": "", "tool_calls": [{"name": "slow", "arguments": {}}]}], SLOW_TOOL)
    with chat_in_slow_tool(agent) as sid:
        running = json.loads(eve_proc("inspect", sid, "--json").stdout)
        assert running["status"] == "running"  # a live process owns it
    view = json.loads(eve_proc("inspect", sid, "--json").stdout)
    assert view["status"] == "interrupted"
    assert view["resume"] == f"eve resume {sid}"
    rows = json.loads(eve_proc("inspect", "--json").stdout)
    assert [row["status"] for row in rows if row["id"] == sid] == ["interrupted"]
    table = eve_proc("inspect")
    assert f"{sid}: interrupted; resume with: eve resume {sid}" in table.stdout


def test_empty_sessions_are_not_listed(eve_proc: EveProc) -> None:
    for _ in range(3):
        assert eve_proc("chat", input="").returncode == 0  # opened, nothing sent
    eve_proc("chat", "-p", "hello there")
    table = eve_proc("inspect")
    assert table.stdout.count("s_") == 1
    assert "(3 empty sessions, never sent a message, not listed)" in table.stdout
    assert len(json.loads(eve_proc("inspect", "--json").stdout)) == 4  # JSON lists them all


def test_debug_is_accepted_after_any_command(eve_proc: EveProc) -> None:
    gc = ["gc", "--older-than", "30d", "--dry-run"]
    for args in (["inspect"], ["log"], ["chat", "-p", "hi"], gc, ["doctor"]):
        done = eve_proc(*args, "--debug")
        assert "No such option" not in done.stderr, (args, done.stderr)
        assert done.returncode in (0, 1), (args, done.stderr)


def test_shell_completion_offers_session_ids(eve_proc: EveProc) -> None:
    chat = eve_proc("chat", "--json", "-p", "hello")
    sid = json.loads(chat.stdout.splitlines()[0])["sessionId"]
    code = "import sys; sys.argv[0] = 'eve'; from eve_cli.cli import main; main()"
    for words in ("eve log s_", "eve chat -s s_"):
        env = {**os.environ, "_EVE_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - 1)}  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.stdout.split() == [sid], (words, done.stdout, done.stderr)


def test_continue_passes_over_a_chat_left_without_a_message(eve_proc: EveProc) -> None:
    first = eve_proc("chat", "--json", "-p", "count the words in a b c")
    sid = json.loads(first.stdout.splitlines()[0])["sessionId"]
    assert eve_proc("chat", input="").returncode == 0  # a newer, empty session
    again = eve_proc("chat", "-c", input="what time is it?\n")
    assert again.returncode == 0, again.stderr
    said = [e["text"] for e in json.loads(eve_proc("log", sid, "--json").stdout)["entries"]
            if e["role"] == "user"]  # fmt: skip
    assert said == ["count the words in a b c", "what time is it?"]


def test_usage_and_cost_totals_in_log_and_inspect(
    eve_proc: EveProc, make_agent: Callable[..., Path]
) -> None:
    usage = {"input": 2_000_000, "output": 500_000, "cache_read": 1_000_000}
    agent = make_agent([{"text": "one", "usage": usage}, {"text": "two", "usage": usage}])
    (agent / "prices.json").write_text('{"scripted": {"input": 1, "output": 2, "cache_read": 0.1}}')
    chat = eve_proc("chat", "--agent", str(agent), "--json", input="a\nb\n")
    sid = json.loads(chat.stdout.splitlines()[0])["sessionId"]
    # Each call: 1M plain input at $1, 1M cached at $0.1, 0.5M output at $2 = $2.10.
    shown = eve_proc("log", sid)
    assert "usage: 4,000,000 in (2,000,000 cache read) / 1,000,000 out · $4.2000" in shown.stdout
    document = json.loads(eve_proc("log", sid, "--json").stdout)
    assert document["usage"]["cost"] == 4.2 and document["usage"]["turns"]["t2"]["cost"] == 2.1
    inspected = json.loads(eve_proc("inspect", sid, "--json").stdout)
    assert inspected["usage"]["usage"]["cacheReadTokens"] == 2_000_000
    assert [t["usage"]["cost"] for t in inspected["turns"]] == [2.1, 2.1]
    tree = eve_proc("inspect", sid).stdout
    assert "usage 4,000,000 in (2,000,000 cache read) / 1,000,000 out · $4.2000" in tree
