"""`eve inspect`: sessions table, session tree, one checkpoint, events; read-only, damage."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from tests.eve_cli.cli.cli_helpers import SLOW_TOOL, Eve, chat_in_slow_tool, data_dir, json_lines


def new_session(eve: Eve, text: str, *extra: str) -> str:
    result = eve("chat", "--json", *extra, input=text)
    assert result.exit_code in (0, 3), result.output
    return str(json_lines(result.stdout)[0]["sessionId"])


def fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_no_sessions(eve: Eve) -> None:
    result = eve("inspect")
    assert result.exit_code == 0
    assert "no sessions in" in result.stdout
    assert not data_dir().exists()  # inspect creates nothing
    assert json.loads(eve("inspect", "--json").stdout) == []


def test_table_and_json_list(eve: Eve) -> None:
    first = new_session(eve, "what time is it?\nhello\n")
    parked = new_session(eve, "remember to buy milk\n")
    table = eve("inspect")
    assert table.exit_code == 0, table.output
    for part in (first, parked, "waiting", "parked (approval)", "turns", "last activity", "size"):
        assert part in table.stdout, part
    rows = json.loads(eve("inspect", "--json").stdout)
    by_id = {row["id"]: row for row in rows}
    assert set(by_id) == {first, parked}
    assert (by_id[first]["status"], by_id[first]["turns"], by_id[first]["steps"]) == (
        "waiting",
        2,
        3,
    )
    assert (by_id[parked]["status"], by_id[parked]["parkedOn"]) == ("parked", "approval")
    assert all(row["bytes"] > 0 for row in rows)


def test_session_tree_and_json(eve: Eve) -> None:
    sid = new_session(eve, "what time is it?\nremember to buy milk\n")
    tree = eve("inspect", sid)
    assert tree.exit_code == 0, tree.output
    for part in (
        f"session {sid}",
        "parked (approval)",
        "turn 1",
        "step 1.0",
        "model call",
        "tool get_current_time()  completed",
        "step 2.0",
        'tool save_note(text="buy milk")  waiting',
        'waiting for approval to run save_note(text="buy milk")',
    ):
        assert part in tree.stdout, part
    obj = json.loads(eve("inspect", sid, "--json").stdout)
    assert (obj["id"], obj["status"], obj["parkedOn"]) == (sid, "parked", "approval")
    assert [len(t["steps"]) for t in obj["turns"]] == [2, 1]
    tool = obj["turns"][0]["steps"][0]["actions"][1]
    assert (tool["kind"], tool["name"], tool["status"]) == ("tool", "get_current_time", "completed")
    assert isinstance(tool["durationMs"], int)
    assert [w["tool"] for w in obj["waits"]] == ["save_note"]


def test_one_checkpoint_and_what_changed(eve: Eve) -> None:
    sid = new_session(eve, "what time is it?\n")
    step = eve("inspect", sid, "--step", "1.1")
    assert step.exit_code == 0, step.output
    assert "changes since step 1.0:" in step.stdout
    assert "+ assistant: It is" in step.stdout
    first = json.loads(eve("inspect", sid, "--step", "1.0", "--json").stdout)
    assert first["previous"] is None
    assert first["changes"][0] == "+ user: what time is it?"
    assert "+ tool calls: get_current_time()" in first["changes"]
    missing = eve("inspect", sid, "--step", "4.0")
    assert missing.exit_code == 1
    assert missing.stderr == f"eve: error: session {sid}: no turn 4 (the session has 1 turns)\n"


def test_events_with_start(eve: Eve) -> None:
    sid = new_session(eve, "hello\n")
    every = json_lines(eve("inspect", sid, "--events", "--json").stdout)
    assert [e["index"] for e in every] == list(range(len(every)))
    last3 = json_lines(eve("inspect", sid, "--events", "--start", "-3", "--json").stdout)
    assert last3 == every[-3:]
    from2 = eve("inspect", sid, "--events", "--start", "2")
    lines = from2.stdout.splitlines()
    assert len(lines) == len(every) - 2
    assert lines[0].split()[0] == "2"
    assert every[2]["type"] in lines[0]


def test_usage_errors(eve: Eve) -> None:
    assert eve("inspect", "--events").exit_code == 2
    sid = new_session(eve, "hello\n")
    assert eve("inspect", sid, "--events", "--step", "1.0").exit_code == 2
    unknown = eve("inspect", "s_doesnotexist")
    assert unknown.exit_code == 1
    assert "no session" in unknown.stderr
    assert eve("inspect", sid, "--step", "x").exit_code == 1


def test_inspect_writes_nothing(eve: Eve) -> None:
    sid = new_session(eve, "what time is it?\nremember to buy milk\n")
    before = fingerprint(data_dir())
    for args in ([], [sid], [sid, "--json"], [sid, "--events"], [sid, "--step", "1.0"]):
        assert eve("inspect", *args).exit_code == 0
    assert fingerprint(data_dir()) == before


def test_inspect_while_another_process_owns_the_session(
    eve: Eve, make_agent: Callable[..., Path]
) -> None:
    agent = make_agent(
        [{"text": "", "tool_calls": [{"name": "slow", "arguments": {}}]}, {"text": "done"}],
        SLOW_TOOL,
    )
    with chat_in_slow_tool(agent) as sid:
        result = eve("inspect", sid, "--json")
        assert result.exit_code == 0, result.output
        obj = json.loads(result.stdout)
        assert obj["status"] == "running"
        assert obj["turns"][0]["steps"][0]["actions"][1]["status"] == "requested"
        assert eve("inspect").exit_code == 0


def test_damaged_data_is_reported_not_a_traceback(eve: Eve) -> None:
    healthy = new_session(eve, "hello\n")
    sid = new_session(eve, "what time is it?\nhello\n")
    damaged = [p for p in data_dir().rglob("*.msgpack") if sid in p.name and "events" in p.name]
    assert damaged
    for path in damaged:  # flip bytes in the middle: a bad record with valid data after it
        raw = bytearray(path.read_bytes())
        middle = len(raw) // 2
        raw[middle : middle + 8] = b"\xff" * 8
        path.write_bytes(bytes(raw))
    result = eve("inspect", sid)
    assert "Traceback" not in result.output
    assert result.exit_code == 1
    assert result.stderr.startswith("eve: error: damaged data in")
    assert "corrupt record at offset" in result.stderr
    assert result.stderr.count("\n") == 1
    listing = eve("inspect")
    assert listing.exit_code == 0, listing.output
    assert "Traceback" not in listing.output
    assert "damaged" in listing.stdout
    assert healthy in listing.stdout
    rows = {row["id"]: row for row in json.loads(eve("inspect", "--json").stdout)}
    assert rows[sid]["status"] == "damaged"
    assert "corrupt record at offset" in rows[sid]["error"]
    assert (rows[healthy]["status"], rows[healthy]["turns"]) == ("waiting", 1)


def test_inspect_on_a_missing_data_dir_for_a_session(eve: Eve, tmp_path: Path) -> None:
    result = eve("inspect", "--data", str(tmp_path / "none"), "s_x")
    assert result.exit_code == 1
    assert "no data directory" in result.stderr
    assert not (tmp_path / "none").exists()


def test_listing_runs_no_agent_code_and_a_broken_agent_stops_no_reading(eve: Eve) -> None:
    sid = new_session(eve, "hello\n")  # the built-in agent; its session stores no model
    Path("agent").mkdir()
    Path("agent/agent.py").write_text(
        "from pathlib import Path\n\nPath('agent-ran').touch()\nraise RuntimeError('broken')\n"
    )
    listing = eve("inspect", "--json")
    assert listing.exit_code == 0, listing.output
    assert [row["id"] for row in json.loads(listing.stdout)] == [sid]
    assert not Path("agent-ran").exists()  # listing sessions never imports the agent folder
    shown = eve("inspect", sid, "--json")  # the view's model needs an agent: the built-in one
    assert shown.exit_code == 0, shown.output
    assert Path("agent-ran").exists()
    assert json.loads(shown.stdout)["model"] == "demo"


def test_a_long_session_shows_its_latest_turns_and_all_with_a_flag(eve: Eve) -> None:
    """`eve inspect SID` shows the latest 20 turns and how many came before; --all every one."""
    sid = new_session(eve, "".join(f"hello {n}\n" for n in range(23)))
    tree = eve("inspect", sid)
    assert tree.exit_code == 0, tree.output
    assert "3 earlier turn(s) not shown" in tree.stdout
    assert f"eve inspect {sid} --all" in tree.stdout
    assert "turn 4 " in tree.stdout and "turn 3 " not in tree.stdout and "turn 23 " in tree.stdout
    shown = json.loads(eve("inspect", sid, "--json").stdout)
    assert (shown["turnCount"], shown["turnsFrom"], len(shown["turns"])) == (23, 4, 20)
    assert [t["number"] for t in shown["turns"]] == list(range(4, 24))
    every = json.loads(eve("inspect", sid, "--json", "--all").stdout)
    assert (every["turnCount"], every["turnsFrom"], len(every["turns"])) == (23, 1, 23)
    assert every["turns"][0]["message"] == "hello 0" and every["steps"] == shown["steps"]
    assert "not shown" not in eve("inspect", sid, "--all").stdout
    assert eve("inspect", sid, "--step", "1.0").exit_code == 0  # an early checkpoint still


def test_reading_a_session_imports_no_tool_of_the_agent(eve: Eve) -> None:
    """`eve inspect SID` and `eve log SID` name the agent's model from its agent.py alone:
    its tools are not imported (a read-only command pays for no agent code beyond that)."""
    sid = new_session(eve, "hello\n")
    Path("agent/tools").mkdir(parents=True)
    Path("agent/agent.py").write_text(
        "from eve_cli import define_agent\n\nagent = define_agent(model='demo', name='default')\n"
    )
    Path("agent/tools/mark.py").write_text("from pathlib import Path\n\nPath('tool-ran').touch()\n")
    shown = eve("inspect", sid, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["model"] == "demo"
    assert eve("log", sid).exit_code == 0
    assert not Path("tool-ran").exists()
