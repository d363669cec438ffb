"""`.workflow-data.example/` stays readable by the current code (format compatibility)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.eve_cli.cli.cli_helpers import Eve, json_lines

EXAMPLE = Path(__file__).resolve().parents[3] / ".workflow-data.example"


def fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_example_data_opens_with_the_current_code(eve: Eve) -> None:
    before = fingerprint(EXAMPLE)
    rows = json.loads(eve("inspect", "--data", str(EXAMPLE), "--json").stdout)
    assert len(rows) == 1
    sid = rows[0]["id"]
    # The listing of data written by an earlier version: counts and agent still right.
    assert (rows[0]["status"], rows[0]["agent"], rows[0]["turns"], rows[0]["steps"]) == (
        "waiting",
        "default",
        5,
        9,
    )
    view = json.loads(eve("inspect", "--data", str(EXAMPLE), sid, "--json").stdout)
    assert len(view["turns"]) >= 4
    assert all(t["status"] == "completed" for t in view["turns"])
    tools = [
        a["name"]
        for t in view["turns"]
        for s in t["steps"]
        for a in s["actions"]
        if a["kind"] == "tool"
    ]
    assert {"get_current_time", "save_note", "ask_question"} <= set(tools)
    events = json_lines(eve("inspect", "--data", str(EXAMPLE), sid, "--events", "--json").stdout)
    resolved = [e for e in events if e["type"] == "input.resolved"]
    assert any(e.get("approved") for e in resolved)
    assert any(e.get("answer") == "blue" for e in resolved)
    table = eve("inspect", "--data", str(EXAMPLE))
    assert sid in table.stdout
    assert fingerprint(EXAMPLE) == before  # read-only


def test_example_session_can_be_continued_in_a_copy(eve: Eve, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "data"
    shutil.copytree(EXAMPLE, copy)
    result = eve("chat", "--data", str(copy), "-c", "-p", "count the words in a b c d")
    assert result.exit_code == 0, result.output
    assert result.stdout == "That text has 4 words.\n"
