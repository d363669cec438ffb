"""The `.py` form of a schedule (`schedules/<name>.py` calling `define_schedule`): the same
schedule as its `.md` twin, run once per edit; a broken one is one line naming the file and
the line at fault, and the others still load."""

from __future__ import annotations

import dataclasses
import os
import textwrap
from pathlib import Path

import pytest

from eve_cli._schedules import load_schedules, read_schedule


def write_py(folder: Path, name: str, body: str) -> Path:
    (folder / "schedules").mkdir(parents=True, exist_ok=True)
    path = folder / "schedules" / f"{name}.py"
    path.write_text("from eve_cli import define_schedule\n\n" + textwrap.dedent(body))
    return path


def test_a_py_schedule_is_the_schedule_its_md_twin_is(tmp_path: Path) -> None:
    write_py(tmp_path / "py", "report", '''
        schedule = define_schedule(
            "Summarise the orders.", cron="0 9 * * 1-5", timezone="Europe/Berlin", missed="once"
        )
    ''')  # fmt: skip
    md = tmp_path / "report.md"
    md.write_text('---\ncron: "0 9 * * 1-5"\ntimezone: Europe/Berlin\nmissed: once\n---\n'
                  "Summarise the orders.\n")  # fmt: skip
    [loaded], problems = load_schedules(tmp_path / "py")
    assert problems == []
    assert dataclasses.replace(loaded, path=md) == read_schedule(md)
    poll = write_py(tmp_path / "py", "poll", "schedule = define_schedule('Poll.', every=90)\n")
    [every, _], _ = load_schedules(tmp_path / "py")  # by name
    assert (every.name, every.when, every.path, every.mode) == ("poll", "every 90s", poll, "task")


def test_a_py_schedule_runs_once_per_edit(tmp_path: Path) -> None:
    count = tmp_path / "runs"
    path = write_py(tmp_path, "tick", f'''
        with open({str(count)!r}, "a") as f:
            f.write("ran\\n")
        schedule = define_schedule("Tick.", every="5m")
    ''')  # fmt: skip
    for _ in range(3):
        [tick], _ = load_schedules(tmp_path)
    assert count.read_text() == "ran\n" and tick.when == "every 5m"
    path.write_text(path.read_text().replace('"5m"', '"10m"'))
    os.utime(path, ns=(1, 10**18))  # a new mtime, even within the file system's granularity
    [tick], _ = load_schedules(tmp_path)
    assert count.read_text() == "ran\nran\n" and tick.when == "every 10m"


@pytest.mark.parametrize(("body", "line", "says"), [
    ("x = 1\n", 1, "defines no schedule"),
    ("a = define_schedule('x', every='1h')\nb = define_schedule('y', every='2h')\n", 4,
     "defines 2 schedules (lines 3, 4)"),
    ("\nschedule = define_schedule('x', cron='* * *')\n", 4, "needs five"),
    ("schedule = define_schedule('x', every='1h', cron='* * * * *')\n", 3, "either cron"),
    ("schedule = define_schedule('x', every='1h', timezone='Mars/Olympus')\n", 3, "time zone"),
    ("schedule = define_schedule('', every='1h')\n", 3, "non-empty text"),
    ("schedule = define_schedule('x', every=['1h'])\n", 3, "expected text"),
    ("schedule = define_schedule('x', every='1h'\n", 3, "syntax error"),
    ("import nowhere_to_be_found\n", 3, "ModuleNotFoundError"),
])  # fmt: skip
def test_a_broken_py_schedule_is_one_line_naming_it_and_the_others_load(
    tmp_path: Path, body: str, line: int, says: str
) -> None:
    bad = write_py(tmp_path, "bad", body)
    write_py(tmp_path, "good", "schedule = define_schedule('Hello.', every='1h')\n")
    schedules, problems = load_schedules(tmp_path)
    assert [s.name for s in schedules] == ["good"]
    [problem] = problems
    assert problem.startswith(f"{bad}:{line}: ") and says in problem, problem
    assert "\n" not in problem


def test_a_py_and_an_md_schedule_of_one_name_is_reported(tmp_path: Path) -> None:
    write_py(tmp_path, "daily", "schedule = define_schedule('From Python.', every='1d')\n")
    (tmp_path / "schedules" / "daily.md").write_text("---\nevery: 1d\n---\nFrom Markdown.")
    [daily], [problem] = load_schedules(tmp_path)
    assert daily.message == "From Markdown."
    where = tmp_path / "schedules" / "daily.py"
    assert problem == f"{where}:1: schedule 'daily' is also in daily.md; keep one"
