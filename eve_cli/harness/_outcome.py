"""What a step, or a part of one, comes to: the loop in :mod:`._step` acts on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Outcome = Literal["continue", "done", "park", "failed", "cancelled"]


@dataclass
class StepResult:
    outcome: Outcome
    error: str | None = None


@dataclass(frozen=True)
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
