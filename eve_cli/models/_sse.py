"""An incremental server-sent-events decoder following the WHATWG HTML event-stream rules.

Bytes go in as they arrive (in any fragmentation, lines ending in CRLF, LF or CR); whole events
come out. Comments (``:`` lines) are skipped, ``data`` lines join with ``\\n``, ``event``,
``id`` and ``retry`` fields are kept, and an event not ended by a blank line before the stream
ends is discarded, as the specification says.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEEvent"]


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event; ``event`` defaults to ``"message"``."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed bytes with :meth:`feed`; each call returns the events completed so far."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # text of an unfinished line
        self._started = False  # a BOM is stripped once, at the very start
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk`` and return the events it completes."""
        text = self._pending + self._utf8.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        events: list[SSEEvent] = []
        start = 0
        length = len(text)
        while start < length:
            cr = text.find("\r", start)
            lf = text.find("\n", start)
            ends = [i for i in (cr, lf) if i >= 0]
            if not ends:
                break
            end = min(ends)
            if text[end] == "\r":
                if end + 1 == length:
                    break  # a CR at the end may be the first half of CRLF: wait for more
                step = 2 if text[end + 1] == "\n" else 1
            else:
                step = 1
            event = self._line(text[start:end])
            if event is not None:
                events.append(event)
            start = end + step
        self._pending = text[start:]
        return events

    def close(self) -> None:
        """End of stream: an event without its terminating blank line is discarded."""
        self._pending = ""
        self._data, self._event = [], ""

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        retry, self._retry = self._retry, None
        return SSEEvent(
            data="\n".join(data), event=event or "message", id=self._last_id, retry=retry
        )
