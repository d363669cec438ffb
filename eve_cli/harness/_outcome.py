"""What a step, or a part of one, comes to: the loop in :mod:`._step` acts on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

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
    state: dict[str, Any] | None  # the session state the call left, when it changed it
    progress: list[str]  # what the tool reported while it ran
    durationMs: int
    extra: dict[str, Any]  # what an MCP call returned besides text
    unknown: bool


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
    # {"id", "name", "arguments"[, "error", "raw"]} each: a call's argument error beside it
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)  # {"input", "output"}: tokens
    error: str | None = None
    cancelled: bool = False
    partial: str = ""
    reasoning: str = ""  # what may be shown of the model's reasoning
    # tools the provider ran: {"id", "name", "arguments", "output", "isError"} each
    provider_calls: list[dict[str, Any]] = field(default_factory=list)
    redacted: bool = False  # some of it came encrypted
