"""The script format of the ``scripted:PATH`` model (a JSON list of answers, entry N for the
session's N-th model call), as ``eve_cli.testing`` writes it and a cassette records it."""

from __future__ import annotations

from typing import Required, TypedDict

from eve_cli._json import JSONValue

__all__ = ["ScriptCall", "ScriptEntry", "ScriptUsage"]


class ScriptCall(TypedDict, total=False):
    """A tool call of a scripted answer (``arguments`` other than an object is an argument
    error, as a model's broken JSON would be)."""

    id: str
    name: Required[str]
    arguments: JSONValue


class ScriptUsage(TypedDict, total=False):
    """What a provider would report of an answer's usage (absent: estimated)."""

    input: int
    output: int
    cache_read: int
    cache_write: int
    reasoning: int


class ScriptEntry(TypedDict, total=False):
    """One answer of a script: text and tool calls, or an ``error`` the call fails with;
    ``reasoning`` shown first; ``delay`` (and ``reasoning_delay``) seconds after the first
    delta, for tests."""

    text: str
    tool_calls: list[ScriptCall]
    reasoning: str
    usage: ScriptUsage
    error: str
    delay: float
    reasoning_delay: float
