"""Bad input, each with one clear error line and nothing stored lost or changed.

Every case runs against a data directory that already holds a session: after the failure,
every file that was there is byte for byte the same, and the directory verifies clean.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from eve_cli.cli.app import app
from eve_cli.runtime import InvalidSessionIdError, Runtime, SessionNotFoundError
from tests.eve_cli.rt_support import DANGER_TOOL as DANGER
from tests.eve_cli.rt_support import call, reply, write_agent
from world import verify

runner = CliRunner()


def _snapshot(data: Path) -> dict[str, str]:
    return {
        str(p.relative_to(data)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(data.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


@pytest.fixture
def stored(isolated: Path) -> tuple[Path, str, dict[str, str]]:
    """A data directory with one session parked on an approval, and its snapshot."""
    data = Path(os.environ["EVE_DATA_DIR"])
    agent = write_agent(isolated / "good", script=[reply("", call("danger", x=1))],
                        tools={"danger": DANGER})  # fmt: skip

    async def main() -> str:
        rt = Runtime(data, agent_dir=agent)
        sid = await rt.create_session()
        await rt.deliver(sid, "go")
        assert (await rt.drive(sid))["status"] == "parked"
        rt.close()
        return sid

    sid = asyncio.run(main())
    return data, sid, _snapshot(data)


def _unchanged(data: Path, before: dict[str, str], allow_new: bool = False) -> None:
    after = _snapshot(data)
    assert {k: after.get(k) for k in before} == before, "stored data changed"
    if not allow_new:
        assert set(after) == set(before), "files appeared"
    assert not [f for f in verify(data) if f.error]


def _one_line(stderr: str, *needles: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -- malformed agent folders -------------------------------------------------------------------
def _agent(root: Path, agent_py: str = "agent = define_agent(model='demo')\n") -> Path:
    (root / "tools").mkdir(parents=True)
    (root / "agent.py").write_text("from eve_cli import define_agent\n" + agent_py)
    (root / "instructions.md").write_text("Be brief.")
    return root


def _syntax(root: Path) -> tuple[str, ...]:
    (_agent(root) / "agent.py").write_text("from eve_cli import define_agent\nagent = (\n")
    return ("agent.py:2", "syntax")


def _tool_syntax(root: Path) -> tuple[str, ...]:
    (_agent(root) / "tools" / "t.py").write_text("from eve_cli import tool\n\ndef f(:\n")
    return ("t.py:3", "syntax")


def _no_hints(root: Path) -> tuple[str, ...]:
    (_agent(root) / "tools" / "t.py").write_text(
        'from eve_cli import tool\n\n@tool\ndef f(x):\n    """Doc."""\n    return x\n'
    )
    return ("t.py:", "'x'", "type hint")


def _duplicate(root: Path) -> tuple[str, ...]:
    body = (
        'from eve_cli import tool\n\n@tool\ndef f(x: int) -> int:\n    """Doc."""\n    return x\n'
    )
    _agent(root)
    (root / "tools" / "a.py").write_text(body)
    (root / "tools" / "b.py").write_text(body)
    return ("b.py:", "duplicate", "'f'", "a.py:")


def _subagent_without_instructions(root: Path) -> tuple[str, ...]:
    sub = root / "subagents" / "helper"
    sub.mkdir(parents=True)
    _agent(root)
    (sub / "agent.py").write_text("from eve_cli import define_agent\nagent = define_agent()\n")
    return ("helper", "instructions")


def _unknown_model(root: Path) -> tuple[str, ...]:
    _agent(root, "agent = define_agent(model='nope:x')\n")
    return ("agent.py:2", "unknown model 'nope:x'")


AGENTS: dict[str, Callable[[Path], tuple[str, ...]]] = {
    "syntax error in agent.py": _syntax,
    "syntax error in a tool": _tool_syntax,
    "tool without type hints": _no_hints,
    "duplicate tool names": _duplicate,
    "sub-agent without instructions": _subagent_without_instructions,
    "unknown model in agent.py": _unknown_model,
}


@pytest.mark.parametrize("case", sorted(AGENTS))
def test_malformed_agent_folders(
    isolated: Path, stored: tuple[Path, str, dict[str, str]], case: str
) -> None:
    data, sid, before = stored
    needles = AGENTS[case](isolated / "bad")
    for args in (["chat", "-p", "hi"], ["chat", "-s", sid, "-p", "hi"]):
        result = runner.invoke(app, [*args, "--agent", str(isolated / "bad")])
        assert result.exit_code == 1
        line = _one_line(result.stderr, *needles)
        assert line.startswith("eve: error: ")
    _unchanged(data, before)


@pytest.mark.parametrize(
    ("model", "variable"),
    [("openai:gpt-4o-mini", "OPENAI_API_KEY"), ("anthropic:claude-3-5-haiku", "ANTHROPIC_API_KEY")],
)
def test_unknown_model_and_missing_api_key(
    stored: tuple[Path, str, dict[str, str]], model: str, variable: str
) -> None:
    data, _, before = stored
    result = runner.invoke(app, ["chat", "-m", "bogus", "-p", "hi"])
    assert result.exit_code == 1
    _one_line(result.stderr, "unknown model 'bogus'")
    _unchanged(data, before)
    result = runner.invoke(app, ["chat", "-m", model, "-p", "hi"])
    assert result.exit_code == 1
    _one_line(result.stderr, variable, model)
    _unchanged(data, before, allow_new=True)  # the session it opened stays, failed turn and all


# -- data directories ------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["chat -p hi", "inspect", "resume --all", "doctor",
                                     "gc --older-than 1d"])  # fmt: skip
def test_invalid_data_paths(isolated: Path, command: str) -> None:
    a_file = isolated / "a-file"
    a_file.write_text("not a directory")
    foreign = isolated / "foreign"
    foreign.mkdir()
    (foreign / "FORMAT").write_text("something else")
    for path in (a_file, a_file / "below", foreign):
        proc = subprocess.run(
            [sys.executable, "-m", "eve_cli", *command.split(), "--data", str(path)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode in (1, 2), (command, path, proc.stderr)
        _one_line(proc.stderr, str(path))
    assert a_file.read_text() == "not a directory"
    assert sorted(p.name for p in foreign.iterdir()) == ["FORMAT"]
    assert (foreign / "FORMAT").read_text() == "something else"


# -- session ids ------------------------------------------------------------------------------
TRAVERSALS = ["../../etc/passwd", "..", "s_x/../../y", "/etc/passwd", "s_x\x00y", "%2e%2e",
              "a" * 65, "", " s_x", "s_x\n"]  # fmt: skip


@pytest.mark.parametrize("sid", TRAVERSALS)
def test_traversal_attempts_in_ids(stored: tuple[Path, str, dict[str, str]], sid: str) -> None:
    data, _, before = stored
    rt = Runtime(data)
    for op in (rt.session,):
        with pytest.raises((InvalidSessionIdError, SessionNotFoundError, ValueError)):
            op(sid)
    with pytest.raises((InvalidSessionIdError, SessionNotFoundError, ValueError)):
        asyncio.run(rt.deliver(sid, "hi"))
    with pytest.raises((InvalidSessionIdError, SessionNotFoundError, ValueError)):
        asyncio.run(rt.drive(sid))
    rt.close()
    if "\x00" not in sid and sid.strip():
        for args in (["chat", "-s", sid, "-p", "hi"], ["inspect", sid], ["resume", sid]):
            result = runner.invoke(app, args)
            assert result.exit_code in (1, 2), (args, result.output)
            _one_line(result.stderr)
    _unchanged(data, before)


def test_unknown_sessions(stored: tuple[Path, str, dict[str, str]]) -> None:
    data, _, before = stored
    unknown = "s_000000000000000000000000"
    for args in (["chat", "-s", unknown, "-p", "hi"], ["inspect", unknown], ["resume", unknown]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1
        _one_line(result.stderr, unknown)
    rt = Runtime(data)
    with pytest.raises(SessionNotFoundError, match=unknown):
        rt.session(unknown)
    with pytest.raises(SessionNotFoundError):
        asyncio.run(rt.respond(unknown, [{"requestId": "t1:call_0_0", "approved": True}]))
    rt.close()
    _unchanged(data, before)


def test_a_damaged_journal_is_one_line_naming_file_and_offset_and_what_to_do(
    stored: tuple[Path, str, dict[str, str]],
) -> None:
    from world import CorruptJournalError

    data, sid, _ = stored
    journal = data / "runs" / sid / "journal.msgpack"
    damaged = bytearray(journal.read_bytes())
    damaged[len(damaged) // 3] ^= 0x55  # a record in the middle: valid ones follow it
    journal.write_bytes(bytes(damaged))
    (data / "runs" / sid / "head.msgpack").unlink()  # the status is read from the journal
    for args in (["resume", sid], ["chat", "-s", sid, "-p", "hi"], ["inspect", sid]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        _one_line(result.stderr, str(journal), "offset", "run `eve doctor --repair`")
    # world says what and where; which command repairs it is the CLI's to say.
    reader = Runtime(data, load_agent=False)
    with pytest.raises(CorruptJournalError) as err:
        reader.session(sid)
    reader.close()
    assert str(journal) in str(err.value) and "eve " not in str(err.value)
    assert journal.read_bytes() == bytes(damaged)  # nothing was rewritten or lost


def test_a_store_of_the_pre_release_format_is_migrated_in_one_line(
    stored: tuple[Path, str, dict[str, str]],
) -> None:
    data, sid, _ = stored
    fmt = data / "FORMAT"
    fmt.write_text('{"format": "eve-world", "version": 1}\n')  # as every store before 0.1
    for record in data.glob("runs/*/streams.list"):  # which format 1 did not write
        record.unlink()
    before = _snapshot(data)
    result = runner.invoke(app, ["doctor"])  # a dry run
    assert result.exit_code == 1, result.output
    _one_line(result.stderr, str(data), "would migrate store format 1 -> 3", "nothing changed")
    assert _snapshot(data) == before
    result = runner.invoke(app, ["inspect", sid])
    assert result.exit_code == 0, result.output
    _one_line(result.stderr, str(data), "migrated store format 1 -> 3: 1 run family,")
    assert runner.invoke(app, ["inspect", sid]).stderr == ""  # once


# -- answers to requests ---------------------------------------------------------------------------
def test_answers_that_are_not_pending_are_rejected_and_change_nothing(
    isolated: Path, stored: tuple[Path, str, dict[str, str]]
) -> None:
    data, sid, before = stored
    rt = Runtime(data)
    [request] = rt.session(sid)["pending"]
    rid = request["requestId"]
    bad: dict[str, list[Any]] = {
        "unknown request": [{"requestId": "t9:call_9_9", "approved": True}],
        "no request id": [{"approved": True}],
        "not a mapping": ["yes"],
        "approved is not a boolean": [{"requestId": rid, "approved": "false"}],
        "an answer to an approval": [{"requestId": rid, "answer": "yes"}],
        "empty": [],
    }
    for case, responses in bad.items():
        receipt = asyncio.run(rt.respond(sid, responses))
        assert receipt.disposition == "rejected" and receipt.reason, case
    _unchanged(data, before)  # nothing was delivered
    assert rt.session(sid)["status"] == "parked" and rt.session(sid)["pending"] == [request]

    assert asyncio.run(rt.respond(sid, [{"requestId": rid, "approved": False}])).disposition == (
        "accepted"
    )
    asyncio.run(rt.drive(sid))
    again = asyncio.run(rt.respond(sid, [{"requestId": rid, "approved": True}]))
    assert again.disposition == "rejected" and "not pending" in str(again.reason)
    rt.close()


@pytest.mark.parametrize(
    "text",
    [
        '{"format": "eve-world", "version": 1}\n',  # format 1 under files only format 2+ writes
        '{"format": "eve-world", "version": 0}\n',  # one byte: 3 -> 0
        '{"format": "eve-world", "version": 7}\n',  # one byte: 3 -> 7 (a newer eve's?)
        '{"format": "eve-world", "versiom": 3}\n',  # one byte of the key
        '{"format": "eve-world", "version": "3"}\n',
        '{"format": "eve-world", "version": 3]\n',
    ],
)
def test_a_damaged_format_is_named_by_doctor_and_repaired(
    stored: tuple[Path, str, dict[str, str]], text: str
) -> None:
    data, sid, before = stored
    fmt = data / "FORMAT"
    kept = json.loads(fmt.read_text())["id"]  # the store's id, kept by the repair
    text = text.replace("{", f'{{"id": "{kept}", ', 1)
    fmt.write_text(text)
    refused = runner.invoke(app, ["inspect", sid])
    assert refused.exit_code != 0
    line = _one_line(refused.stderr, str(fmt), "eve doctor --repair")
    assert "migrat" not in line, line  # not taken for a store of another format
    checked = runner.invoke(app, ["doctor", "--json"])
    assert checked.exit_code == 1, checked.output
    [finding] = [f for f in json.loads(checked.stdout)["findings"] if f["path"] == "FORMAT"]
    assert finding["state"] == "unreadable"
    assert finding["detail"].endswith("rewrites it as version 3 (the old one in quarantine/)")
    repaired = runner.invoke(app, ["doctor", "--repair"])
    assert repaired.exit_code == 0, repaired.output
    assert json.loads(fmt.read_text()) == {"format": "eve-world", "version": 3, "id": kept}
    assert [p.read_text() for p in data.glob("quarantine/*/FORMAT")] == [text]
    shown = runner.invoke(app, ["inspect", sid])
    assert shown.exit_code == 0 and shown.stderr == "", shown.output
    after = _snapshot(data)
    assert {k: after.get(k) for k in before if k != "FORMAT"} == {
        k: v for k, v in before.items() if k != "FORMAT"
    }
