"""Structured results (``output_schema``): the final answer parsed and validated, a ``result``
event with the value, one repair turn on a bad answer, then a clear failure.

A JSON schema is checked here for what structured outputs use (``type``, ``properties``,
``required``, ``additionalProperties: false``, ``items``, ``enum``, ``anyOf``); a pydantic
model given to ``define_agent`` validates itself.
"""

from __future__ import annotations

import json
from typing import Any

from eve_cli._json import JSONObject
from eve_cli._keys import ModelCall
from eve_cli.harness._host import StepHost
from eve_cli.harness._outcome import StepResult

__all__ = ["check_result", "parse_result"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def parse_result(text: str, schema: JSONObject, model: Any = None) -> tuple[Any, str | None]:
    """``(value, None)`` when ``text`` is JSON valid for ``schema`` (or the pydantic ``model``),
    else ``(None, why)``."""
    body = text.strip()
    if body.startswith("```"):  # a fenced block: its inside
        body = body.split("\n", 1)[-1].rsplit("```", 1)[0]
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"the answer is not JSON ({exc.msg} at character {exc.pos})"
    if model is not None:
        try:
            return model.model_validate(value).model_dump(mode="json"), None
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            return None, " ".join(str(exc).split())[:500]
    problem = _problem(value, schema, "$")
    return (value, None) if problem is None else (None, problem)


def _problem(value: Any, schema: Any, path: str) -> str | None:
    if not isinstance(schema, dict):
        return None
    if "anyOf" in schema:
        if all(_problem(value, option, path) for option in schema["anyOf"]):
            return f"{path} matches none of the allowed forms"
        return None
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(_is(value, k) for k in kinds):
        return f"{path} must be {' or '.join(kinds)}, not {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} must be one of {schema['enum']}"
    if isinstance(value, dict):
        return _object_problem(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        return _items_problem(value, schema["items"], path)
    return None


def _items_problem(value: list[Any], schema: Any, path: str) -> str | None:
    problems = (_problem(item, schema, f"{path}[{n}]") for n, item in enumerate(value))
    return next((problem for problem in problems if problem is not None), None)


def _object_problem(value: JSONObject, schema: JSONObject, path: str) -> str | None:
    properties, required = schema.get("properties"), schema.get("required")
    if not isinstance(properties, dict):
        properties = {}
    for name in required if isinstance(required, list) else ():
        if name not in value:
            return f"{path} lacks the required {name!r}"
    for name, item in value.items():
        if name in properties:
            if (problem := _problem(item, properties[name], f"{path}.{name}")) is not None:
                return problem
        elif schema.get("additionalProperties") is False:
            return f"{path} has {name!r}, which the schema does not allow"
    return None


def _is(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def output_schema(host: StepHost) -> tuple[JSONObject | None, Any]:
    """The schema this turn's answer follows (the one its message came with, else the
    agent's) and the pydantic model that validates it (the agent's only)."""
    if host.snap.turn_schema is not None:
        return host.snap.turn_schema, None
    return host.agent.config.output_schema, host.agent.config.output_type


def check_result(host: StepHost, index: int, keys: ModelCall, text: str) -> StepResult:
    """The final answer of a turn with an output schema: a ``result`` event when it is valid;
    else one repair (the error told to the model, another step), then a failure."""
    schema, model = output_schema(host)
    assert schema is not None
    value, problem = parse_result(text, schema, model)
    if problem is None:
        host.emit("result", {"value": value}, keys.result, index)
        return StepResult("done")
    if host.snap.repairs >= 1:
        return StepResult("failed", f"the answer does not match output_schema: {problem}")
    host.snap.repairs += 1
    fix = (
        f"Your answer does not match the required JSON schema: {problem}. Answer again with "
        "only the JSON value, matching the schema."
    )
    host.append_history({"role": "user", "content": fix}, keys.repair)
    return StepResult("continue")
