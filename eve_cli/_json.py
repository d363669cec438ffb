"""The one declared form of JSON whose shape eve does not own: a tool's arguments, a JSON
Schema, a provider's or an MCP server's extra fields. Shapes eve owns (events, views, receipts,
wire messages) are `TypedDict`s beside their code, not this."""

from __future__ import annotations

from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]

__all__ = ["JSONObject", "JSONScalar", "JSONValue"]
