"""What a case is: its conversation, answers, tool stubs and expectations, parsed from one
mapping of a case file (YAML, or the keywords of `case()` in a Python file) with each mistake
reported as ``file:line: what``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eve_cli.evals._yamlfile import CaseFileError, line_of

# A Python check: given the run, fails by raising AssertionError or returning False or a str.
Check = Callable[[Any], Any]

CASE_KEYS = frozenset(
    (
        "name",
        "description",
        "messages",
        "message",
        "answers",
        "stubs",
        "expect",
        "tags",
        "model",
        "judge_model",
        "threshold",
        "mode",
    )
)
EXPECT_KEYS = frozenset(
    (
        "contains",
        "not_contains",
        "regex",
        "equals",
        "json_schema",
        "result_schema",
        "tools_called",
        "tools_not_called",
        "max_steps",
        "max_tokens",
        "max_cost",
        "max_seconds",
        "no_error",
        "judge",
        "check",
    )
)


@dataclass(frozen=True)
class Stub:
    """A tool's result given instead of running it, for calls whose arguments match."""

    tool: str
    arguments: Mapping[str, Any]  # argument -> pattern (see `matches`)
    result: str
    is_error: bool = False


@dataclass(frozen=True)
class Answer:
    """The answer to the next approval (``approve``) or question (``text``) the case meets."""

    approve: bool | None = None
    text: str | None = None
    tool: str | None = None  # the tool the approval must be for, when given
    line: int = 0


@dataclass(frozen=True)
class ToolCallExpected:
    """A tool the agent must call, with arguments matching these patterns."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Judge:
    """An LLM judge: a model grades the final reply against ``rubric`` from 0 to 1."""

    rubric: str
    model: str | None = None
    min_score: float = 0.7


@dataclass(frozen=True)
class Expect:
    """What a run must show (every field optional; ``no_error`` on by default)."""

    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    regex: tuple[re.Pattern[str], ...] = ()
    equals: str | None = None
    json_schema: Mapping[str, Any] | None = None
    result_schema: Mapping[str, Any] | None = None
    tools_called: tuple[ToolCallExpected, ...] = ()
    tools_not_called: tuple[str, ...] = ()
    max_steps: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None
    no_error: bool = True
    judge: Judge | None = None
    check: Check | None = None
    check_name: str | None = None


@dataclass(frozen=True)
class Case:
    """One eval case: a conversation run as a session, and what it must show."""

    name: str
    file: Path
    line: int
    messages: tuple[str, ...]
    expect: Expect = field(default_factory=Expect)
    answers: tuple[Answer, ...] = ()
    stubs: tuple[Stub, ...] = ()
    tags: tuple[str, ...] = ()
    model: str | None = None
    judge_model: str | None = None  # the file's judge, for a judge naming none
    threshold: float | None = None  # the pass rate it needs (None: the run's default)
    mode: str | None = None
    description: str = ""
    tool_refs: tuple[tuple[str, int], ...] = ()  # each tool the case names, and the line

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def matches(pattern: Any, value: Any) -> bool:
    """Whether an argument ``value`` matches ``pattern``: a str pattern is a regular
    expression matched against the whole value (its JSON-ish text for a non-str), a mapping
    matches key by key, anything else must be equal."""
    if isinstance(pattern, str):
        text = value if isinstance(value, str) else _text(value)
        return re.fullmatch(pattern, text, re.DOTALL) is not None
    if isinstance(pattern, Mapping):
        return isinstance(value, Mapping) and all(
            k in value and matches(p, value[k]) for k, p in pattern.items()
        )
    return bool(pattern == value) and isinstance(pattern, bool) == isinstance(value, bool)


def arguments_match(patterns: Mapping[str, Any], arguments: Any) -> bool:
    return isinstance(arguments, Mapping) and all(
        k in arguments and matches(p, arguments[k]) for k, p in patterns.items()
    )


def _text(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, default=str)


class Fields:
    """Typed reads of one mapping of a case file, each mistake at its line."""

    def __init__(self, path: Path, data: Any, line: int, what: str) -> None:
        if not isinstance(data, Mapping):
            raise CaseFileError(path, line_of(data, line), f"{what} must be a mapping")
        self.path, self.data, self.what = path, data, what
        self.line = line_of(data, line)

    def at(self, key: str) -> int:
        finder = getattr(self.data, "line_of", None)
        return int(finder(key)) if finder is not None else self.line

    def fail(self, key: str, message: str) -> CaseFileError:
        return CaseFileError(self.path, self.at(key), message)

    def only(self, allowed: frozenset[str]) -> None:
        for key in self.data:
            if key not in allowed:
                hint = _closest(str(key), allowed)
                raise self.fail(key, f"unknown {self.what} key {key!r}{hint}")

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def text(self, key: str, *, required: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise CaseFileError(self.path, self.line, f"{self.what} needs {key!r}")
            return None
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(key, f"{key!r} must be a text")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise self.fail(key, f"{key!r} must be a text or a list of texts")
        return tuple(items)

    def number(self, key: str, *, whole: bool = False, upto: float | None = None) -> Any:
        value = self.data.get(key)
        if value is None:
            return None
        ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        if not ok or isinstance(value, bool) or value < 0 or (upto is not None and value > upto):
            kind = "a whole number" if whole else "a number"
            bound = f" from 0 to {upto:g}" if upto is not None else " (0 or more)"
            raise self.fail(key, f"{key!r} must be {kind}{bound}, not {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"{key!r} must be true or false")
        return value

    def items(self, key: str) -> list[tuple[Any, int]]:
        """The items of a list (or one value) with their lines."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            return [(value, self.at(key))]
        finder = getattr(value, "line_of", None)
        return [(v, int(finder(i)) if finder else self.at(key)) for i, v in enumerate(value)]


def _closest(key: str, allowed: frozenset[str]) -> str:
    import difflib

    near = difflib.get_close_matches(key, sorted(allowed), n=1)
    return f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(sorted(allowed))})"
