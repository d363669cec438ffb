"""`eve schedules`: the agent's schedules with their next and last runs and the sessions they
made (`--json`), a broken file named by file and line (exit 1, the others listed), and
`--run NAME` to start one now."""

from __future__ import annotations

import json
from pathlib import Path

from tests.eve_cli.cli.cli_helpers import Eve
from tests.eve_cli.rt_support import reply, write_agent


def agent(root: Path) -> Path:
    folder = write_agent(root, script=[reply("reported")])
    (folder / "schedules").mkdir()
    (folder / "schedules" / "daily.md").write_text(
        "---\ncron: 30 9 * * *\ntimezone: Europe/Berlin\nmissed: once\n---\nReport.\n"
    )
    return folder


def test_schedules_lists_runs_now_and_lists_the_run(eve: Eve, tmp_path: Path) -> None:
    folder = agent(tmp_path / "agent")
    empty = json.loads(eve("schedules", "--agent", str(folder), "--json").stdout)
    [row] = empty["schedules"]
    assert (row["name"], row["when"], row["timezone"], row["missed"]) == (
        "daily", "cron 30 9 * * *", "Europe/Berlin", "once"
    )  # fmt: skip
    assert row["next"].endswith(("T07:30:00+00:00", "T08:30:00+00:00"))  # 09:30 in Berlin
    assert (row["last"], row["sessions"], empty["problems"]) == (None, 0, [])
    ran = eve("schedules", "--agent", str(folder), "--run", "daily")
    assert ran.exit_code == 0, ran.output
    sid, _, outcome = ran.stdout.strip().partition(": ")
    assert outcome == "completed"
    after = json.loads(eve("schedules", "--agent", str(folder), "--json").stdout)["schedules"][0]
    assert (after["sessions"], after["lastSession"]) == (1, sid)
    assert [m["sessionId"] for m in after["made"]] == [sid]
    table = eve("schedules", "--agent", str(folder))
    assert table.exit_code == 0 and "daily" in table.stdout and sid in table.stdout
    unknown = eve("schedules", "--agent", str(folder), "--run", "weekly")
    assert unknown.exit_code == 1 and "no schedule 'weekly'" in unknown.stderr


def test_a_broken_schedule_is_one_line_and_the_others_are_listed(eve: Eve, tmp_path: Path) -> None:
    folder = agent(tmp_path / "agent")
    (folder / "schedules" / "bad.md").write_text("---\nevery: 5m\nmode: forever\n---\nx\n")
    result = eve("schedules", "--agent", str(folder))
    assert result.exit_code == 1
    assert f"{folder / 'schedules' / 'bad.md'}:3: mode 'forever'" in result.stderr
    assert "daily" in result.stdout and "Traceback" not in result.output


def test_listing_reads_the_agent_py_not_the_tools(eve: Eve, tmp_path: Path) -> None:
    """Listing needs the schedule files and the agent's name: a broken agent.py is said (as a
    load says it, schedules or none), a broken tool is not (`--run` loads the agent, and
    says it)."""
    folder = agent(tmp_path / "agent")
    (folder / "tools").mkdir(exist_ok=True)
    (folder / "tools" / "broken.py").write_text("x = (\n")
    listed = eve("schedules", "--agent", str(folder), "--json")
    assert listed.exit_code == 0, listed.output
    assert [row["name"] for row in json.loads(listed.stdout)["schedules"]] == ["daily"]
    ran = eve("schedules", "--agent", str(folder), "--run", "daily")
    assert ran.exit_code == 1 and f"{folder / 'tools' / 'broken.py'}:1: syntax" in ran.stderr
    (folder / "tools" / "broken.py").unlink()
    agent_py = (folder / "agent.py").read_text()
    for schedules in (True, False):
        if not schedules:
            (folder / "schedules" / "daily.md").unlink()
        (folder / "agent.py").write_text(agent_py + "\nagent = (\n")
        broken = eve("schedules", "--agent", str(folder))
        assert broken.exit_code == 1 and f"{folder / 'agent.py'}:" in broken.stderr
        assert "syntax error" in broken.stderr and "Traceback" not in broken.output
        (folder / "agent.py").write_text(
            "from eve_cli import define_agent\nagent = define_agent(model='x')\n"
        )
        wrong = eve("schedules", "--agent", str(folder))
        assert wrong.exit_code == 1 and "unknown model 'x'" in wrong.stderr
