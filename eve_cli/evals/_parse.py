"""One case's mapping turned into a `Case` (the format is in the README, "Evals")."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eve_cli._json import JSONObject
from eve_cli.evals._case import (
    CASE_KEYS,
    EXPECT_KEYS,
    Answer,
    Case,
    Check,
    Expect,
    Fields,
    Judge,
    Stub,
    ToolCallExpected,
)
from eve_cli.evals._yamlfile import CaseFileError

STUB_KEYS = frozenset(("tool", "arguments", "result", "error"))
ANSWER_KEYS = frozenset(("approve", "answer", "tool"))
JUDGE_KEYS = frozenset(("rubric", "model", "min_score"))
CALLED_KEYS = frozenset(("name", "arguments"))
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")

# Finds the check a case names: ("checks.py:fn" or a callable, the line) -> (check, its name).
CheckFinder = Callable[[Any, int], tuple[Check, str]]


@dataclass(frozen=True)
class FileDefaults:
    """What a case file sets for all its cases."""

    model: str | None = None
    judge_model: str | None = None
    tags: tuple[str, ...] = ()


def parse_case(
    path: Path, data: Any, line: int, defaults: FileDefaults, find_check: CheckFinder
) -> Case:
    """The case ``data`` (a mapping at ``line`` of ``path``) describes.

    Raises:
        CaseFileError: at the line of the first mistake.
    """
    f = Fields(path, data, line, "case")
    f.only(CASE_KEYS)
    name = f.text("name", required=True) or ""
    if not _NAME.fullmatch(name):
        raise f.fail("name", f"case name {name!r}: use letters, digits, '_', '-', '.', ':'")
    messages = _messages(f)
    mode = f.text("mode")
    if mode not in (None, "conversation", "task"):
        raise f.fail("mode", f"mode must be conversation or task, not {mode!r}")
    model = f.text("model") or defaults.model
    expect, refs = _expect(path, f.get("expect"), f.at("expect"), find_check)
    stubs = [(_stub(path, v, at), at) for v, at in f.items("stubs")]
    answers = tuple(_answer(path, v, at) for v, at in f.items("answers"))
    refs += [(s.tool, at) for s, at in stubs] + [(a.tool, a.line) for a in answers if a.tool]
    return Case(
        name=name,
        file=path,
        line=f.line,
        messages=messages,
        expect=expect,
        answers=answers,
        stubs=tuple(s for s, _ in stubs),
        tool_refs=tuple(refs),
        tags=tuple(dict.fromkeys((*defaults.tags, *f.texts("tags")))),
        model=_model(f, "model", model),
        judge_model=f.text("judge_model") or defaults.judge_model,
        threshold=_threshold(f),
        mode=mode,
        description=f.text("description") or "",
    )


def expectations_of(data: Mapping[str, Any]) -> Expect:
    """An ``expect:`` mapping given in Python (`eve_cli.testing.expect`).

    Raises:
        CaseFileError: a mistake (its place is the caller's code, line 0).
    """
    from eve_cli.evals._load import python_check

    expect, _ = _expect(Path("<expect>"), dict(data), 0, python_check)
    return expect


def _threshold(f: Fields) -> float | None:
    value = f.number("threshold", upto=1.0)
    return None if value is None else float(value)


def _messages(f: Fields) -> tuple[str, ...]:
    if "message" in f.data and "messages" in f.data:
        raise f.fail("message", "give 'message' or 'messages', not both")
    key = "message" if "message" in f.data else "messages"
    messages = f.texts(key)
    if not messages:
        raise f.fail(key, "a case needs 'messages': one or more user messages")
    if any(not m.strip() for m in messages):
        raise f.fail(key, "a message is empty")
    return messages


def _model(f: Fields, key: str, model: str | None) -> str | None:
    if model is None:
        return None
    from eve_cli._loader import check_model_string

    problem = check_model_string(model)
    if problem:
        raise f.fail(key, problem)
    kind, _, rest = model.partition(":")
    if kind == "scripted" and not Path(rest).is_absolute():  # relative to the case file
        return f"scripted:{(f.path.parent / rest).resolve()}"
    return model


def _stub(path: Path, data: Any, line: int) -> Stub:
    f = Fields(path, data, line, "stub")
    f.only(STUB_KEYS)
    tool = f.text("tool", required=True) or ""
    result = f.get("result")
    if result is None:
        raise f.fail("tool", f"the stub of {tool!r} needs 'result' (what the tool returns)")
    if not isinstance(result, str):
        import json

        result = json.dumps(result)
    return Stub(tool, _patterns(f, "arguments"), result, f.flag("error", False))


def _patterns(f: Fields, key: str) -> Mapping[str, Any]:
    value = f.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise f.fail(key, f"{key!r} must be a mapping of argument name to pattern")
    for name, pattern in value.items():
        if isinstance(pattern, str):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise f.fail(key, f"argument {name!r}: not a regular expression: {exc}") from None
    return dict(value)


def _answer(path: Path, data: Any, line: int) -> Answer:
    f = Fields(path, data, line, "answer")
    f.only(ANSWER_KEYS)
    if ("approve" in f.data) == ("answer" in f.data):
        raise CaseFileError(path, f.line, "an answer is 'approve: true|false' or 'answer: TEXT'")
    approve = f.flag("approve", True) if "approve" in f.data else None
    text = f.get("answer")
    if text is not None and not isinstance(text, str):
        text = str(text)
    return Answer(approve=approve, text=text, tool=f.text("tool"), line=f.line)


def _expect(
    path: Path, data: Any, line: int, find_check: CheckFinder
) -> tuple[Expect, list[tuple[str, int]]]:
    if data is None:
        return Expect(), []
    f = Fields(path, data, line, "expectation")
    f.only(EXPECT_KEYS)
    check, check_name = (None, None)
    if f.get("check") is not None:
        check, check_name = find_check(f.get("check"), f.at("check"))
    called = [(_called(path, v, at), at) for v, at in f.items("tools_called")]
    not_called = f.texts("tools_not_called")
    refs = [(c.name, at) for c, at in called]
    refs += [
        (name, at) for (name, at) in zip(not_called, _lines(f, "tools_not_called"), strict=True)
    ]
    return Expect(
        contains=f.texts("contains"),
        not_contains=f.texts("not_contains"),
        regex=_regexes(f),
        equals=f.text("equals"),
        json_schema=_schema(f, "json_schema"),
        result_schema=_schema(f, "result_schema"),
        tools_called=tuple(c for c, _ in called),
        tools_not_called=not_called,
        max_steps=f.number("max_steps", whole=True),
        max_tokens=f.number("max_tokens", whole=True),
        max_cost=f.number("max_cost"),
        max_seconds=f.number("max_seconds"),
        no_error=f.flag("no_error", True),
        judge=_judge(path, f.get("judge"), f.at("judge")) if "judge" in f.data else None,
        check=check,
        check_name=check_name,
    ), refs


def _lines(f: Fields, key: str) -> list[int]:
    return [at for _, at in f.items(key)]


def _regexes(f: Fields) -> tuple[re.Pattern[str], ...]:
    found = []
    for pattern in f.texts("regex"):
        try:
            found.append(re.compile(pattern))
        except re.error as exc:
            raise f.fail("regex", f"{pattern!r} is not a regular expression: {exc}") from None
    return tuple(found)


def _schema(f: Fields, key: str) -> Mapping[str, Any] | None:
    schema = f.get(key)
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        raise f.fail(key, f"{key!r} must be a JSON schema (a mapping)")
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise f.fail(key, f"{key!r} is not a valid JSON schema: {exc.message}") from None
    plain: JSONObject = _plain(schema)
    return plain


def _plain(value: Any) -> Any:
    """A located mapping as plain dicts and lists (what the schema validator expects)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _called(path: Path, data: Any, line: int) -> ToolCallExpected:
    if isinstance(data, str):
        return ToolCallExpected(data)
    f = Fields(path, data, line, "tools_called item")
    f.only(CALLED_KEYS)
    return ToolCallExpected(f.text("name", required=True) or "", _patterns(f, "arguments"))


def _judge(path: Path, data: Any, line: int) -> Judge:
    if isinstance(data, str):
        data = {"rubric": data}
    f = Fields(path, data, line, "judge")
    f.only(JUDGE_KEYS)
    rubric = f.text("rubric", required=True) or ""
    model = f.text("model")
    if model is not None:
        _model(f, "model", model)
    score = f.number("min_score", upto=1.0)
    return Judge(rubric, model, 0.7 if score is None else float(score))
