"""JSON Schemas a server lists for its tools: usable ones go to the model, an unusable one
keeps its tool away from the model (a provider would refuse the whole request); arguments
are checked against them before a call, so the model gets a tool error it can act on.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from eve_cli._json import JSONObject, JSONValue

MAX_SCHEMA = 64 * 1024  # bytes of one tool's schema as JSON


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be a tool's input schema (None: it can)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return 'its input schema is not a JSON Schema of "type": "object"'
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError):
        return "its input schema is not JSON"
    if size > MAX_SCHEMA:
        return f"its input schema is {size} bytes (at most {MAX_SCHEMA})"
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"its input schema is invalid: {exc.message}"
    return None


def argument_problem(schema: JSONObject, arguments: JSONValue) -> str | None:
    """What is wrong with ``arguments`` for ``schema`` (None: nothing)."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    return "; ".join(
        f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}"
        for e in errors[:5]
    )
