"""Schedule times and files (SPEC §16): five-field cron in a time zone, intervals aligned to the
epoch, and `schedules/*.md` whose broken files are one line naming file and line each."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from eve_cli._cron import ScheduleError, parse_cron, parse_every
from eve_cli._schedules import load_schedules, read_schedule

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")


def ts(*parts: int, zone: dt.tzinfo = UTC) -> float:
    year, month, day, hour, minute, second = (*parts, 0, 0, 0)[:6]
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=zone).timestamp()


def at(value: float | None, zone: dt.tzinfo = UTC) -> str:
    assert value is not None
    return dt.datetime.fromtimestamp(value, zone).strftime("%Y-%m-%d %a %H:%M")


@pytest.mark.parametrize(("cron", "after", "expected"), [
    ("* * * * *", (2026, 1, 1, 10, 0, 30), "2026-01-01 Thu 10:01"),
    ("0 9 * * 1-5", (2026, 1, 2, 9, 0), "2026-01-05 Mon 09:00"),  # Friday 9:00 passed
    ("*/15 * * * *", (2026, 1, 1, 10, 7), "2026-01-01 Thu 10:15"),
    ("5,35 8-9 * * *", (2026, 1, 1, 9, 40), "2026-01-02 Fri 08:05"),
    ("0 0 1 jan *", (2026, 3, 1, 0, 0), "2027-01-01 Fri 00:00"),
    ("0 12 * * sun", (2026, 1, 1, 0, 0), "2026-01-04 Sun 12:00"),
    ("0 12 * * 7", (2026, 1, 1, 0, 0), "2026-01-04 Sun 12:00"),
    ("0 0 13 * fri", (2026, 1, 1, 0, 0), "2026-01-02 Fri 00:00"),  # either day field
    ("0 0 29 2 *", (2026, 1, 1, 0, 0), "2028-02-29 Tue 00:00"),
    ("10-20/5 1 * * *", (2026, 1, 1, 1, 12), "2026-01-01 Thu 01:15"),
])  # fmt: skip
def test_the_next_cron_tick(cron: str, after: tuple[int, ...], expected: str) -> None:
    assert at(parse_cron(cron).next_after(ts(*after), UTC)) == expected


def test_the_last_cron_tick_at_or_before() -> None:
    cron = parse_cron("30 9 * * *")
    assert at(cron.last_at_or_before(ts(2026, 1, 2, 9, 30), UTC)) == "2026-01-02 Fri 09:30"
    assert at(cron.last_at_or_before(ts(2026, 1, 2, 9, 29), UTC)) == "2026-01-01 Thu 09:30"


def test_cron_ticks_in_the_schedule_s_time_zone_across_daylight_saving() -> None:
    daily = parse_cron("30 2 * * *")  # 02:30 does not exist in Berlin on 2026-03-29
    tick = daily.next_after(ts(2026, 3, 28, 12, 0, zone=BERLIN), BERLIN)
    assert at(tick, BERLIN) == "2026-03-30 Mon 02:30"
    repeated = parse_cron("30 2 * * *")  # 02:30 happens twice on 2026-10-25: one tick
    first = repeated.next_after(ts(2026, 10, 25, 0, 0, zone=BERLIN), BERLIN)
    second = repeated.next_after(first or 0, BERLIN)
    assert (
        at(first, BERLIN) == "2026-10-25 Sun 02:30" and at(second, BERLIN) == "2026-10-26 Mon 02:30"
    )
    nine = parse_cron("0 9 * * *").next_after(ts(2026, 6, 1, 0, 0), BERLIN)
    assert at(nine, UTC) == "2026-06-01 Mon 07:00"  # 09:00 summer time is 07:00 UTC


@pytest.mark.parametrize(("cron", "says"), [
    ("* * * *", "needs five"), ("60 * * * *", "minute 60 is out of range 0-59"),
    ("* * * foo *", "month 'foo': expected a number 1-12 or a name"),
    ("*/0 * * * *", "the step after '/' must be a number above 0"),
    ("5-1 * * * *", "the range runs backwards"),
])  # fmt: skip
def test_a_bad_cron_says_which_field(cron: str, says: str) -> None:
    with pytest.raises(ScheduleError, match=says):
        parse_cron(cron)


def test_intervals() -> None:
    assert [parse_every(t) for t in ("30s", "5m", "1h", "1d", "1.5h")] == [
        30,
        300,
        3600,
        86400,
        5400,
    ]
    for bad in ("5", "m", "0s", "5 minutes"):
        with pytest.raises(ScheduleError):
            parse_every(bad)


def write(folder: Path, name: str, text: str) -> Path:
    (folder / "schedules").mkdir(parents=True, exist_ok=True)
    path = folder / "schedules" / f"{name}.md"
    path.write_text(text)
    return path


def test_a_schedule_file_and_its_ticks(tmp_path: Path) -> None:
    text = '---\ncron: "0 9 * * 1-5"  # weekdays\ntimezone: Europe/Berlin\nmissed: once\n---\n'
    path = write(tmp_path, "report", text + "Summarise the orders.\n")
    schedule = read_schedule(path)
    assert (schedule.name, schedule.when, schedule.mode, schedule.missed) == (
        "report",
        "cron 0 9 * * 1-5",
        "task",
        "once",
    )
    assert schedule.message == "Summarise the orders."
    assert at(schedule.next_after(ts(2026, 1, 2, 12, 0)), BERLIN) == "2026-01-05 Mon 09:00"
    every = read_schedule(
        write(tmp_path, "poll", "---\nevery: 30s\nmode: conversation\n---\nPoll.")
    )
    assert (every.when, every.mode) == ("every 30s", "conversation")
    assert every.next_after(95.0) == 120.0 and every.last_at_or_before(95.0) == 90.0


@pytest.mark.parametrize(("text", "line", "says"), [
    ("cron: * * * * *\n---\nx", 1, "starts with a front matter"),
    ("---\ncron: * * * * *\n", 2, "no closing '---'"),
    ("---\ncron: * * * * *\n---\n\n", 3, "no message"),
    ("---\nwhen: now\n---\nx", 2, "expected one of cron, every"),
    ("---\ncron: * * *\n---\nx", 2, "needs five"),
    ("---\nevery: 5m\ncron: * * * * *\n---\nx", 2, "either cron: or every:"),
    ("---\nevery: 5m\ntimezone: Mars/Olympus\n---\nx", 3, "not a known time zone"),
    ("---\nevery: 5m\nmissed: twice\n---\nx", 3, "expected skip or once"),
    ("---\n\nevery: 5m\nmode: forever\n---\nx", 4, "expected task or conversation"),
])  # fmt: skip
def test_a_broken_file_is_one_line_naming_it_and_the_others_load(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    bad = write(tmp_path, "bad", text)
    write(tmp_path, "good", "---\nevery: 1h\n---\nHello.")
    schedules, problems = load_schedules(tmp_path)
    assert [s.name for s in schedules] == ["good"]
    [problem] = problems
    assert problem.startswith(f"{bad}:{line}: ") and says in problem
