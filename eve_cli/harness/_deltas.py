"""A model call's streamed text as ``message.appended`` events, and what it shows of its
reasoning as ``reasoning.appended`` events (see :class:`DeltaBuffer`)."""

from __future__ import annotations

import asyncio

from eve_cli._keys import DeltaKeys, Key
from eve_cli._text import repair_str
from eve_cli.harness._host import StepHost

DELTA_MAX = 2000  # characters of one delta event at most


class DeltaBuffer:
    """Coalesces streamed text into ``message.appended`` events: the first deltas at the
    loop's next turn (whatever arrived together: a model that yields its whole text at once
    stores one event), then whatever arrived within 0.2 s of the text held first, as one
    event (at most :data:`DELTA_MAX` characters). A reader sees text at most 0.2 s after the
    model sent it, and a fast stream stores a few events a second, not one per token.

    Keys carry the text offset (:meth:`DeltaKeys.delta`): when an interrupted call runs
    again, the part of its text already streamed is not appended a second time. With
    ``reasoning``, the same over the call's reasoning keys as ``reasoning.appended`` events.
    """

    def __init__(
        self,
        host: StepHost,
        keys: DeltaKeys,
        step: int,
        *,
        reasoning: bool = False,
        before: DeltaBuffer | None = None,
    ) -> None:
        self.host, self.keys, self.step, self.reasoning = host, keys, step, reasoning
        self.before = before  # a buffer whose text is stored before this one's (the reasoning)
        self.held: list[str] = []
        self.size = 0  # characters held
        self.offset = 0  # characters flushed so far
        self.timer: asyncio.Handle | None = None
        self._streamed: int | None = None  # (`streamed`: looked up once text arrives)
        self.sent: list[str] = []  # what this run appended
        self.indexes: list[int] = []  # where (event indexes)

    @property
    def streamed(self) -> int:
        """Characters an earlier run of this call already stored (looked up on first use: most
        calls show no reasoning, whose buffer then never asks)."""
        if self._streamed is None:
            self._streamed = max((start + length for start, length, _ in self.spans()), default=0)
        return self._streamed

    async def add(self, text: str) -> None:
        """Hold one streamed delta (after storing what ``before`` holds). A model streams many:
        this is all each costs, no call but the list's append while the timer runs."""
        before = self.before
        if before is not None and before.held:
            before.flush()
        self.held.append(text)
        self.size += len(text)
        if self.size >= DELTA_MAX:
            self.flush()
        elif self.timer is None:
            self._later()

    def _later(self) -> None:
        loop = asyncio.get_running_loop()
        # The first text at once (the loop's next turn), later text within 0.2 s.
        first = self.offset == 0
        self.timer = loop.call_soon(self.flush) if first else loop.call_later(0.2, self.flush)

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        text, self.held, self.size = "".join(self.held), [], 0
        if not text:
            return  # nothing arrived since the last flush
        text = repair_str(text)  # same length: offsets hold (the reply's repair warns)
        start, self.offset = self.offset, self.offset + len(text)
        streamed = self.streamed
        if self.offset <= streamed:
            return  # stored by an earlier run of this call
        if start < streamed:
            text, start = text[streamed - start :], streamed
        key = self.keys.delta(start, len(text))
        if self.reasoning:
            self.host.emit("reasoning.appended", {"delta": text}, key, self.step)
        else:
            self.host.emit("message.appended", {"delta": text}, key, self.step)
        self.sent.append(text)
        index = self.host.emitted_index(key)
        if index is not None:
            self.indexes.append(index)

    def spans(self) -> list[tuple[int, int, Key]]:
        """``(start, length, key)`` of each delta event of this call stored so far."""
        return self.host.emitted_deltas(self.keys)

    def holds(self, text: str) -> bool:
        """True when this run's events hold ``text`` whole (none came from an earlier run,
        whose text a non-deterministic model may not repeat)."""
        return (
            self.streamed == 0
            and len(self.indexes) == len(self.sent)
            and "".join(self.sent) == text
        )

    def text_events(self) -> tuple[str, list[int]] | None:
        """The text this call's delta events hold and their indexes: what this run appended
        (when it made the call), else what is stored (a replay)."""
        if self.sent and self.streamed == 0:
            return "".join(self.sent), list(self.indexes)
        return self.stored_text()

    def stored_text(self) -> tuple[str, list[int]] | None:
        """The text of this call's stored delta events, in order, and their indexes; None
        when they are not one unbroken run from the start."""
        text, indexes = "", []
        for start, length, key in sorted(self.spans(), key=lambda span: span[:2]):
            event = self.host.emitted_event(key)
            delta = event.get("delta") if event is not None else None
            index = self.host.emitted_index(key)
            if start != len(text) or not isinstance(delta, str) or len(delta) != length:
                return None
            if index is None:
                return None
            text += delta
            indexes.append(index)
        return text, indexes
