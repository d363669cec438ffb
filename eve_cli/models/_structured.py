"""Structured output as each provider takes it: OpenAI's ``json_schema`` (strict when the
schema allows it), Anthropic's forced ``final_result`` tool whose input is the answer."""

from __future__ import annotations

from typing import TypedDict

from eve_cli._json import JSONObject, JSONValue

__all__ = ["FINAL_TOOL", "SchemaFormat", "json_schema_format", "strict_ok"]

#: The tool an Anthropic model answers through when the agent has an output schema.
FINAL_TOOL = "final_result"


def strict_ok(schema: JSONValue) -> bool:
    """Whether OpenAI's strict mode takes ``schema``: every object closed
    (``additionalProperties: false``) with all its properties required."""
    if isinstance(schema, list):
        return all(strict_ok(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        if schema.get("additionalProperties") is not False:
            return False
        if not isinstance(properties, dict) or not isinstance(required, list):
            return False
        if {str(name) for name in required} != set(properties):
            return False
    return all(strict_ok(v) for k, v in schema.items() if k not in ("required", "enum", "const"))


class SchemaFormat(TypedDict):
    """The ``json_schema`` object of a structured-output request."""

    name: str
    schema: JSONObject
    strict: bool


def json_schema_format(schema: JSONObject) -> SchemaFormat:
    """The ``json_schema`` object of a structured-output request."""
    return {"name": "result", "schema": schema, "strict": strict_ok(schema)}
