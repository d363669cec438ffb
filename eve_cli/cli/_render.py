"""Renderers for output that is not an interactive terminal: plain replies, or NDJSON events.

Both write replies/events to stdout and problems to stderr. The Rich terminal renderer lives in
`_render_rich.py` (imported only for a chat at a terminal: Rich Markdown is costly to import);
all three share the `Renderer` shape the chat loop drives.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeGuard

from eve_cli.cli._events import ERROR_TYPES, Event, error_text, field

if TYPE_CHECKING:
    from eve_cli.cli._render_rich import RichRenderer


@dataclass(frozen=True)
class Banner:
    """What the chat banner shows."""

    session_id: str
    agent: str
    model: str
    data_dir: str
    resumed: bool = False


class Renderer(Protocol):
    """What the chat loop calls; each method must be cheap and never raise on odd events."""

    def banner(self, info: Banner) -> None: ...

    def event(self, event: Event) -> None: ...

    def notice(self, text: str) -> None: ...

    def error(self, text: str) -> None: ...

    def close(self) -> None: ...


def is_rich(renderer: Renderer) -> TypeGuard[RichRenderer]:
    """Whether `renderer` is the terminal renderer, without importing it: no instance can exist
    before its module was imported."""
    module = sys.modules.get("eve_cli.cli._render_rich")
    return module is not None and isinstance(renderer, module.RichRenderer)


class PlainRenderer:
    """Reply text on stdout (every model reply, or only the last one with `final_only`),
    failures on stderr; nothing else."""

    def __init__(
        self, out: TextIO | None = None, err: TextIO | None = None, final_only: bool = False
    ) -> None:
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._final_only = final_only
        self._last: str | None = None
        self._last_error: str | None = None  # step.failed and turn.failed repeat one error

    def banner(self, info: Banner) -> None:
        del info  # stdout carries replies only

    def event(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "message.completed":
            text = str(field(event, "text") or "")
            if text.strip():
                if self._final_only:
                    self._last = text
                else:
                    self._write(self._out, text)
        elif kind in ERROR_TYPES:
            text = error_text(event)
            if text != self._last_error:
                self.error(text)
            self._last_error = text
        elif kind == "turn.cancelled":
            self.notice("turn cancelled")
        elif kind == "turn.started":
            self._last_error = None

    def notice(self, text: str) -> None:
        self._write(self._err, text)

    def error(self, text: str) -> None:
        self._write(self._err, f"eve: error: {text}")

    def close(self) -> None:
        if self._last is not None:
            self._write(self._out, self._last)
            self._last = None

    @staticmethod
    def _write(stream: TextIO, text: str) -> None:
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()


class JsonRenderer:
    """Every event as one JSON line on stdout (NDJSON); notices and errors on stderr."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out = out or sys.stdout
        self._err = err or sys.stderr

    def banner(self, info: Banner) -> None:
        del info  # the first event line carries the session id

    def event(self, event: Event) -> None:
        self._out.write(dumps(event) + "\n")
        self._out.flush()

    def notice(self, text: str) -> None:
        self._err.write(text + "\n")
        self._err.flush()

    def error(self, text: str) -> None:
        self.notice(f"eve: error: {text}")

    def close(self) -> None:
        self._out.flush()


def dumps(value: Mapping[str, Any] | list[Any]) -> str:
    """Compact JSON for one NDJSON line; non-JSON values (datetimes, bytes) become strings."""
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
