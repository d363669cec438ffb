"""Expectations checked against a run: each failed one is a line saying what was expected and
what the run showed. (The LLM judge, which calls a model, is in `_judge`.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from eve_cli.evals._case import Expect, arguments_match
from eve_cli.evals._outcome import CaseRun

_SHOWN = 120  # characters of a reply quoted in a failure


def check_run(expect: Expect, run: CaseRun) -> list[str]:
    """Every expectation ``run`` misses (the judge excepted), one line each."""
    failures: list[str] = []
    for checker in _CHECKERS:
        failures += checker(expect, run)
    return failures


def _quote(text: str) -> str:
    return json.dumps(text if len(text) <= _SHOWN else text[:_SHOWN] + "…", ensure_ascii=False)


def _reply(expect: Expect, run: CaseRun) -> list[str]:
    out = []
    for text in expect.contains:
        if text not in run.reply:
            out.append(f"reply does not contain {text!r}: {_quote(run.reply)}")
    for text in expect.not_contains:
        if text in run.reply:
            out.append(f"reply contains {text!r}: {_quote(run.reply)}")
    for pattern in expect.regex:
        if pattern.search(run.reply) is None:
            out.append(f"reply does not match /{pattern.pattern}/: {_quote(run.reply)}")
    if expect.equals is not None and run.reply.strip() != expect.equals.strip():
        out.append(f"reply is not {expect.equals!r}: {_quote(run.reply)}")
    return out


def _schemas(expect: Expect, run: CaseRun) -> list[str]:
    out = []
    if expect.json_schema is not None and run.has_result:  # the agent's structured answer
        out += _schema_problems("result", expect.json_schema, run.result)
    elif expect.json_schema is not None:
        try:
            value = json.loads(run.reply)
        except ValueError:
            out.append(f"reply is not JSON: {_quote(run.reply)}")
        else:
            out += _schema_problems("reply", expect.json_schema, value)
    if expect.result_schema is not None:
        if not run.has_result:
            out.append("no structured result (the agent emitted no result event)")
        else:
            out += _schema_problems("result", expect.result_schema, run.result)
    return out


def _schema_problems(what: str, schema: Any, value: Any) -> list[str]:
    import jsonschema

    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return []
    where = "/".join(str(p) for p in error.absolute_path)
    return [f"{what} does not fit the schema{f' at {where}' if where else ''}: {error.message}"]


def _tools(expect: Expect, run: CaseRun) -> list[str]:
    out = []
    for wanted in expect.tools_called:
        calls = run.called(wanted.name)
        if not calls:
            made = ", ".join(sorted({c.name for c in run.tool_calls})) or "none"
            out.append(f"tool {wanted.name!r} was not called (called: {made})")
        elif wanted.arguments and not any(
            arguments_match(wanted.arguments, c.arguments) for c in calls
        ):
            seen = "; ".join(json.dumps(c.arguments, default=str) for c in calls[:3])
            want = json.dumps(dict(wanted.arguments), default=str)
            out.append(
                f"tool {wanted.name!r} was not called with arguments matching {want} "
                f"(called with {seen})"
            )
    for name in expect.tools_not_called:
        if run.called(name):
            out.append(f"tool {name!r} was called ({len(run.called(name))} time(s))")
    return out


def _limits(expect: Expect, run: CaseRun) -> list[str]:
    out = []
    if expect.max_steps is not None and run.steps > expect.max_steps:
        out.append(f"took {run.steps} steps, at most {expect.max_steps} expected")
    if expect.max_tokens is not None and run.tokens > expect.max_tokens:
        out.append(f"used {run.tokens} tokens, at most {expect.max_tokens} expected")
    if expect.max_cost is not None:
        if run.cost is None:
            out.append("cost unknown (the model's usage carries no price), max_cost cannot hold")
        elif run.cost > expect.max_cost:
            out.append(f"cost {run.cost:.6g}, at most {expect.max_cost:g} expected")
    if expect.max_seconds is not None and run.seconds > expect.max_seconds:
        out.append(f"took {run.seconds:.2f} s, at most {expect.max_seconds:g} s expected")
    return out


def _errors(expect: Expect, run: CaseRun) -> list[str]:
    out = []
    if run.stopped:
        out.append(run.stopped)
    if expect.no_error:
        out += [f"error: {e}" for e in run.errors]
    return out


def _python(expect: Expect, run: CaseRun) -> list[str]:
    if expect.check is None:
        return []
    name = expect.check_name or "check"
    try:
        verdict = expect.check(run)
    except AssertionError as exc:
        return [f"check {name} failed: {exc}" if str(exc) else f"check {name} failed"]
    except Exception as exc:
        return [f"check {name} raised {type(exc).__name__}: {exc}"]
    if verdict is False:
        return [f"check {name} returned False"]
    if isinstance(verdict, str) and verdict:
        return [f"check {name}: {verdict}"]
    return []


_CHECKERS: tuple[Callable[[Expect, CaseRun], list[str]], ...] = (
    _errors,
    _reply,
    _schemas,
    _tools,
    _limits,
    _python,
)
