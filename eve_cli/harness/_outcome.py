"""What a step, or a part of one, comes to: the loop in :mod:`._step` acts on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Outcome = Literal["continue", "done", "park", "failed", "cancelled"]


@dataclass
class StepResult:
    outcome: Outcome
    error: str | None = None
