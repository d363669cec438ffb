"""What a stream reader has seen of a model's reasoning and not yet handed on."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ShownReasoning:
    """Base of the wire readers: reasoning text seen in the stream, taken as it arrives."""

    shown: list[str] = field(default_factory=list)

    def take_shown(self) -> str:
        """The reasoning text seen since the last call."""
        text, self.shown = "".join(self.shown), []
        return text
