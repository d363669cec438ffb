"""Schedules of an agent folder: ``schedules/<name>.md``, each a front matter saying when and a
body saying what (SPEC §16)::

    ---
    cron: "0 9 * * 1-5"      # or every: 30s | 5m | 1h | 1d
    timezone: Europe/Berlin  # default UTC
    mode: task               # default task (a session that ends after its turn)
    missed: skip             # or once: ticks missed while nothing ran
    ---
    Summarise yesterday's orders.

Each tick starts one session whose first message is the body. The same can be said in
Python, ``schedules/<name>.py``::

    from eve_cli import define_schedule

    schedule = define_schedule("Summarise yesterday's orders.", cron="0 9 * * 1-5",
                               timezone="Europe/Berlin")

A broken file is one problem naming its file and line; the others still load.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

from eve_cli._cron import Cron, ScheduleError, parse_cron, parse_every, zone_of

Missed = Literal["skip", "once"]
KEYS = ("cron", "every", "timezone", "mode", "missed")
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Schedule:
    """One schedule file as loaded."""

    name: str
    path: Path
    message: str
    cron: Cron | None = None
    every: float | None = None
    timezone: str = "UTC"
    mode: Literal["conversation", "task"] = "task"
    missed: Missed = "skip"

    @property
    def when(self) -> str:
        """How it is said in the file: ``cron 0 9 * * 1-5`` or ``every 30s``."""
        if self.cron is not None:
            return f"cron {self.cron.text}"
        assert self.every is not None
        return f"every {_seconds(self.every)}"

    @property
    def zone(self) -> dt.tzinfo:
        return zone_of(self.timezone)

    def next_after(self, at: float) -> float | None:
        """The first tick strictly after ``at`` (seconds since the epoch)."""
        if self.cron is not None:
            return self.cron.next_after(at, self.zone)
        assert self.every is not None
        return (at // self.every + 1) * self.every

    def last_at_or_before(self, at: float) -> float | None:
        """The latest tick at or before ``at``."""
        if self.cron is not None:
            return self.cron.last_at_or_before(at, self.zone)
        assert self.every is not None
        return (at // self.every) * self.every


def _seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value % size == 0:
            return f"{int(value // size)}{unit}"
    return f"{value:g}s"


@dataclass(frozen=True)
class ScheduleDefinition:
    """What :func:`define_schedule` returns: the fields as given, and the line giving them."""

    message: object
    fields: dict[str, object]
    line: int


def define_schedule(
    message: str,
    *,
    cron: str | None = None,
    every: str | float | None = None,
    timezone: str = "UTC",
    mode: Literal["task", "conversation"] = "task",
    missed: Missed = "skip",
) -> ScheduleDefinition:
    """A schedule in ``schedules/<name>.py`` (``schedule = define_schedule(...)``), as a
    ``schedules/<name>.md`` with the same front matter would be: ``cron`` (five fields) or
    ``every`` (``"30s"``, ``"5m"``, ``"1h"``, ``"1d"``, or seconds as a number), and
    ``message``, what each session starts with. Checked when the folder's schedules are
    loaded; a mistake is reported with this call's file and line."""
    given: dict[str, object] = {"cron": cron, "every": every, "timezone": timezone,
                                "mode": mode, "missed": missed}  # fmt: skip
    fields = {key: value for key, value in given.items() if value is not None}
    return ScheduleDefinition(message, fields, sys._getframe(1).f_lineno)


# path -> ((mtime_ns, size), the schedule or the problem): a `.py` schedule runs once per edit,
# not at every look of the server's scheduler.
_LOADED: dict[Path, tuple[tuple[int, int], Schedule | str]] = {}


def load_schedules(agent_dir: Path) -> tuple[list[Schedule], list[str]]:
    """The schedules of ``agent_dir`` (by name) and a ``file:line: what`` line per broken
    file."""
    folder = agent_dir / "schedules"
    schedules: list[Schedule] = []
    problems: list[str] = []
    if not folder.is_dir():
        return schedules, problems
    seen: dict[str, Path] = {}
    paths = [*folder.glob("*.md"), *folder.glob("*.py")]
    for path in sorted(paths, key=lambda p: (p.stem, p.suffix)):
        if path.name.startswith((".", "_")):
            continue
        if path.stem in seen:
            other = seen[path.stem].name
            problems.append(f"{path}:1: schedule {path.stem!r} is also in {other}; keep one")
            continue
        seen[path.stem] = path
        try:
            schedules.append(read_schedule(path) if path.suffix == ".md" else _read_py(path))
        except ScheduleFileError as exc:
            problems.append(str(exc))
    return schedules, problems


def _read_py(path: Path) -> Schedule:
    """The schedule a ``schedules/<name>.py`` defines (run once per change of the file)."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise ScheduleFileError(path, 1, f"cannot be read: {exc}") from None
    version = (stat.st_mtime_ns, stat.st_size)
    kept = _LOADED.get(path)
    if kept is None or kept[0] != version:
        try:
            kept = (version, _run_py(path))
        except ScheduleFileError as exc:
            kept = (version, str(exc))
        _LOADED[path] = kept
    if isinstance(kept[1], str):
        raise ScheduleFileError.said(kept[1])
    return kept[1]


def _run_py(path: Path) -> Schedule:
    from eve_cli._loader import AgentLoadError, exec_user_file

    name = _name_of(path)
    try:
        module = exec_user_file(path)
    except AgentLoadError as exc:
        raise ScheduleFileError.said(str(exc)) from None
    found = [v for v in vars(module).values() if isinstance(v, ScheduleDefinition)]
    if len(found) != 1:
        lines = ", ".join(str(d.line) for d in found)
        raise ScheduleFileError(
            path, found[1].line if found else 1,
            f"defines {len(found)} schedules (lines {lines}); one file is one schedule"
            if found else "defines no schedule: schedule = define_schedule(message, cron=...)",
        )  # fmt: skip
    [definition] = found
    if not isinstance(definition.message, str) or not definition.message.strip():
        raise ScheduleFileError(path, definition.line, "the message must be non-empty text")
    fields: dict[str, tuple[str, int]] = {}
    for key, value in definition.fields.items():
        if key == "every" and isinstance(value, int | float) and not isinstance(value, bool):
            value = f"{value:g}s"
        if not isinstance(value, str):
            raise ScheduleFileError(path, definition.line, f"{key}={value!r}: expected text")
        fields[key] = (value, definition.line)
    return _schedule(path, name, definition.message.strip(), fields)


class ScheduleMark(TypedDict):
    """What a session a schedule started keeps in its meta (``schedule``)."""

    agent: str
    name: str
    tick: float  # the tick it was started for (by hand: when it was asked for)
    manual: NotRequired[bool]  # started by hand (`eve schedules --run`), not by a tick


class MadeSession(TypedDict):
    tick: str  # ISO time
    sessionId: str


class ScheduleRow(TypedDict):
    """One schedule as `eve schedules` and ``GET /eve/v1/schedules`` list it."""

    name: str
    when: str
    timezone: str
    mode: str
    missed: str
    next: str | None  # ISO times
    last: str | None
    lastSession: str | None
    sessions: int  # how many sessions it started
    made: list[MadeSession]  # the latest 10 of them
    file: str


class ScheduleFileError(ValueError):
    """A schedule file that cannot be used: ``file:line: what is wrong``."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")

    @classmethod
    def said(cls, text: str) -> ScheduleFileError:
        """One whose ``file:line: what`` line is already written (by the agent loader)."""
        error = cls.__new__(cls)
        ValueError.__init__(error, text)
        return error


def _name_of(path: Path) -> str:
    """The schedule's name: its file's, checked."""
    if not NAME.fullmatch(path.stem):
        raise ScheduleFileError(
            path, 1, f"schedule name {path.stem!r}: use letters, digits, '-' and '_' (at most 64)"
        )
    return path.stem


def read_schedule(path: Path) -> Schedule:
    """Parse one schedule file; `ScheduleFileError` names the line at fault."""
    name = _name_of(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScheduleFileError(path, 1, f"cannot be read: {exc}") from None
    if not lines or lines[0].strip() != "---":
        raise ScheduleFileError(
            path, 1, "a schedule starts with a front matter: a '---' line, 'cron: ...' or "
            "'every: ...', then '---' and the message"
        )  # fmt: skip
    fields, end = _front_matter(path, lines)
    message = "\n".join(lines[end:]).strip()
    if not message:
        raise ScheduleFileError(path, end, "no message after the front matter (the body is "
                                "what each session starts with)")  # fmt: skip
    return _schedule(path, name, message, fields)


def _front_matter(path: Path, lines: list[str]) -> tuple[dict[str, tuple[str, int]], int]:
    """The ``key: value`` lines after the first ``---`` (each with its line number) and the
    number of the closing ``---`` line."""
    fields: dict[str, tuple[str, int]] = {}
    end = None
    for number, raw in enumerate(lines[1:], start=2):
        text = raw.strip()
        if text == "---":
            end = number
            break
        if not text or text.startswith("#"):
            continue
        key, sep, value = text.partition(":")
        key = key.strip().lower()
        if not sep or key not in KEYS:
            raise ScheduleFileError(
                path, number, f"{text!r}: expected one of {', '.join(KEYS)} as 'key: value'"
            )
        if key in fields:
            raise ScheduleFileError(path, number, f"{key!r} is given twice")
        fields[key] = (_value(value), number)
    if end is None:
        raise ScheduleFileError(path, len(lines), "the front matter has no closing '---' line")
    return fields, end


def _schedule(path: Path, name: str, message: str, fields: dict[str, tuple[str, int]]) -> Schedule:
    def fail(key: str, why: str) -> ScheduleFileError:
        return ScheduleFileError(path, fields[key][1] if key in fields else 1, why)

    if ("cron" in fields) == ("every" in fields):
        raise fail("every" if "every" in fields else "cron", "give either cron: or every:, once")
    cron = every = None
    try:
        if "cron" in fields:
            cron = parse_cron(fields["cron"][0])
        else:
            every = parse_every(fields["every"][0])
    except ScheduleError as exc:
        raise fail("cron" if "cron" in fields else "every", str(exc)) from None
    zone = fields.get("timezone", ("UTC", 0))[0]
    try:
        zone_of(zone)
    except ScheduleError as exc:
        raise fail("timezone", str(exc)) from None
    mode = fields.get("mode", ("task", 0))[0]
    if mode not in ("task", "conversation"):
        raise fail("mode", f"mode {mode!r}: expected task or conversation")
    missed = fields.get("missed", ("skip", 0))[0]
    if missed not in ("skip", "once"):
        raise fail("missed", f"missed {missed!r}: expected skip or once (run once to catch up)")
    return Schedule(
        name=name,
        path=path,
        message=message,
        cron=cron,
        every=every,
        timezone=zone,
        mode=mode,  # type: ignore[arg-type]
        missed=missed,  # type: ignore[arg-type]
    )


def _value(text: str) -> str:
    """A front matter value: quotes taken off, a trailing ``# comment`` dropped."""
    text = text.strip()
    if text[:1] in ("'", '"'):
        quote = text[0]
        close = text.find(quote, 1)
        if close > 0:
            return text[1:close]
    return text.split(" #", 1)[0].strip()
