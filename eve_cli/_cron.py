"""When a schedule ticks: five-field cron expressions and fixed intervals, in a time zone.

``minute hour day-of-month month day-of-week``, each ``*``, a number, a range ``a-b``, a
step ``*/n`` or ``a-b/n``, or a comma list of those; months and days of the week also by
their English three-letter names; day of the week 0-7 (0 and 7: Sunday). When both day
fields are restricted a day matches either (as every cron does). Times are wall-clock times
in the schedule's zone: a time a daylight-saving change skips does not tick, one it repeats
ticks once (the first).

An interval (``30s``, ``5m``, ``1h``, ``1d``) ticks at the multiples of it since the epoch, so
every process computes the same ticks.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names: the first one's value is the lowest)
FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, MONTHS),
    ("day of week", 0, 7, DAYS),
)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SEARCH_DAYS = 366 * 5  # a cron that matches no day within this never ticks (e.g. 30 Feb)


class ScheduleError(ValueError):
    """A schedule's time cannot be understood (the message says which part and why)."""


@dataclass(frozen=True)
class Cron:
    """A parsed five-field cron expression."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Monday … 6 = Sunday (Python's weekday())
    any_day: bool  # day of month is `*`
    any_weekday: bool  # day of week is `*`

    def day_matches(self, day: dt.date) -> bool:
        in_month = day.day in self.days
        in_week = day.weekday() in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def next_after(self, after: float, zone: dt.tzinfo) -> float | None:
        """The first tick strictly after ``after`` (seconds since the epoch); None if none."""
        local = dt.datetime.fromtimestamp(after, zone).replace(tzinfo=None)
        start = local.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        day = start.date()
        for _ in range(SEARCH_DAYS):
            if day.month in self.months and self.day_matches(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        wall = dt.datetime.combine(day, dt.time(hour, minute))
                        if wall < start:
                            continue
                        when = _real(wall, zone)
                        if when is not None and when > after:
                            return when
            day += dt.timedelta(days=1)
        return None

    def last_at_or_before(self, at: float, zone: dt.tzinfo) -> float | None:
        """The latest tick at or before ``at``; None if none within the search window."""
        local = dt.datetime.fromtimestamp(at, zone).replace(tzinfo=None)
        day = local.date()
        for _ in range(SEARCH_DAYS):
            if day.month in self.months and self.day_matches(day):
                for hour in sorted(self.hours, reverse=True):
                    for minute in sorted(self.minutes, reverse=True):
                        wall = dt.datetime.combine(day, dt.time(hour, minute))
                        if wall > local:
                            continue
                        when = _real(wall, zone)
                        if when is not None and when <= at:
                            return when
            day -= dt.timedelta(days=1)
        return None


def _real(wall: dt.datetime, zone: dt.tzinfo) -> float | None:
    """The instant a wall-clock time names in ``zone``: None for a time a DST change skips;
    the first of two for a time it repeats."""
    first = wall.replace(tzinfo=zone, fold=0)
    back = first.astimezone(dt.UTC).astimezone(zone).replace(tzinfo=None)
    if back != wall:
        return None  # skipped: the round trip lands elsewhere
    return first.timestamp()


def parse_cron(text: str) -> Cron:
    """Parse five fields; `ScheduleError` names the field at fault."""
    parts = text.split()
    if len(parts) != 5:
        raise ScheduleError(
            f"cron {text!r} has {len(parts)} field(s); it needs five: minute hour "
            "day-of-month month day-of-week (e.g. '0 9 * * 1-5')"
        )
    sets = [_field(part, *spec) for part, spec in zip(parts, FIELDS, strict=True)]
    weekdays = frozenset((d - 1) % 7 for d in sets[4])  # cron: 0/7 Sunday, 1 Monday
    return Cron(
        text=" ".join(parts),
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=weekdays,
        any_day=parts[2] == "*",
        any_weekday=parts[4] == "*",
    )


def _field(part: str, name: str, low: int, high: int, names: tuple[str, ...]) -> frozenset[int]:
    values: set[int] = set()
    for item in part.split(","):
        spec, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ScheduleError(f"{name} {item!r}: the step after '/' must be a number above 0")
            step = int(step_text)
        if spec == "*":
            first, last = low, high
        elif "-" in spec:
            a, _, b = spec.partition("-")
            first, last = _value(a, name, low, high, names), _value(b, name, low, high, names)
            if first > last:
                raise ScheduleError(f"{name} {item!r}: the range runs backwards")
        else:
            first = _value(spec, name, low, high, names)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _value(text: str, name: str, low: int, high: int, names: tuple[str, ...]) -> int:
    lowered = text.lower()
    if lowered in names:
        return names.index(lowered) + low
    if not text.isdigit():
        known = f" or a name ({', '.join(names)})" if names else ""
        raise ScheduleError(f"{name} {text!r}: expected a number {low}-{high}{known}")
    value = int(text)
    if not low <= value <= high:
        raise ScheduleError(f"{name} {value} is out of range {low}-{high}")
    return value


def parse_every(text: str) -> float:
    """Seconds of an interval such as ``30s``, ``5m``, ``1h`` or ``1d``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text.lower())
    if match is None:
        raise ScheduleError(f"every {text!r}: expected a number and a unit, e.g. 30s, 5m, 1h, 1d")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    if seconds < 1:
        raise ScheduleError(f"every {text!r}: the interval must be at least 1 s")
    return seconds


def zone_of(name: str | None) -> dt.tzinfo:
    """The time zone named (IANA, e.g. Europe/Berlin); UTC when none is named."""
    if not name or name.upper() == "UTC":
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError):
        raise ScheduleError(
            f"timezone {name!r} is not a known time zone (IANA names such as Europe/Berlin)"
        ) from None
