"""What a step, or a part of one, comes to: the loop in :mod:`._step` acts on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

from eve_cli._json import JSONObject
from eve_cli._tools import ToolExtra
from eve_cli.models import ProviderCall

Outcome = Literal["continue", "done", "park", "failed", "cancelled"]


@dataclass(slots=True)
class StepResult:
    outcome: Outcome
    error: str | None = None


class ToolOutcome(TypedDict, total=False):
    """What a tool call's action journals: its result, or ``unknown`` alone (an interrupted
    ``unsafe`` call, which does not run again: see ``_effects``)."""

    content: str
    isError: bool
    state: JSONObject | None  # the session state the call left, when it changed it
    progress: list[str]  # what the tool reported while it ran
    durationMs: int
    extra: ToolExtra  # what an MCP call returned besides text
    unknown: bool


class ToolCallRecord(TypedDict):
    """A tool call the model asked for, as a reply's history item keeps it."""

    id: str
    name: str
    arguments: JSONObject | None  # None: they could not be parsed (see `ArgumentError`)


class ArgumentError(TypedDict):
    """Why a call's arguments could not be parsed (``error``), and what arrived (``raw``)."""

    error: str | None
    raw: str | None


class AnsweredCall(ToolCallRecord, total=False):
    """A tool call of a model's answer: its argument error beside it, if it had one."""

    error: str | None
    raw: str | None


class CallResult(TypedDict):
    """A call's result for the model: its text and whether it failed."""

    content: str
    isError: bool


@dataclass(slots=True)  # not frozen: made at every step, and a frozen one costs twice as much
class ModelAnswer:
    """What a step's model call gave the step: the reply as history holds it (``index``),
    or why there is none (``error``; ``cancelled``, with what it had streamed: ``partial``)."""

    index: int = -1
    text: str = ""
    tool_calls: list[AnsweredCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)  # {"input", "output"}: tokens
    error: str | None = None
    cancelled: bool = False
    partial: str = ""
    reasoning: str = ""  # what may be shown of the model's reasoning
    provider_calls: list[ProviderCall] = field(default_factory=list)  # tools the provider ran
    redacted: bool = False  # some of it came encrypted
