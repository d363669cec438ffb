"""OpenTelemetry traces of turns (SPEC §14): opt-in, and free when off.

On with ``EVE_OTEL=1`` (any process) or ``define_agent(tracing=True)`` (that agent's turns);
exported by the standard OTLP/HTTP exporter, configured by the standard variables
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``..._HEADERS``,
``OTEL_SERVICE_NAME``, ``OTEL_BSP_SCHEDULE_DELAY``, …). Message and tool content is recorded
only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

The tree of one turn, with the GenAI semantic conventions::

    invoke_agent <agent>            the turn (gen_ai.conversation.id = the session)
      step <turn>.<index>           one durable step (its usage)
        chat <model>                a model call (model, usage, finish reasons)
        execute_tool <tool>         a tool call
        compaction                  a summary of older history (its model call's usage)

Ids are derived, not drawn: the trace from the session and turn, the turn's and each step's
span from those and the step, so a turn resumed in another process (after ``kill -9`` too)
continues the same trace under the same parents. A turn's and a step's span are written once,
by the process that stores their end event, with the start their stored start event has.

Nothing here imports opentelemetry: :func:`begin` returns None when tracing is off, and the
execution layer then asks nothing more for that turn. The SDK is imported (``_otel``) by the
first turn that traces.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eve_cli._keys import Key, Turn

if TYPE_CHECKING:
    from eve_cli._tracing._otel import TurnTrace

ENV = "EVE_OTEL"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_TRUE = ("1", "true", "yes", "on")

__all__ = [
    "CONTENT_ENV",
    "ENV",
    "TurnInfo",
    "begin",
    "env_enabled",
    "shutdown",
    "span_id",
    "trace_id",
]


def env_enabled() -> bool:
    """True when ``EVE_OTEL`` asks every turn of this process to be traced."""
    return os.environ.get(ENV, "").strip().lower() in _TRUE


@dataclass(frozen=True)
class TurnInfo:
    """What a turn's trace needs from its host."""

    session_id: str
    turn: Turn  # the turn's keys
    agent: str
    model: str
    # The epoch seconds of a stored event of this turn, by its key (None: not stored).
    stored_at: Callable[[Key], float | None]

    @property
    def turn_id(self) -> str:
        return self.turn.id


def begin(info: Callable[[], TurnInfo], agent_wants: bool) -> TurnTrace | None:
    """The trace of one turn's run in this process, or None when tracing is off (then
    nothing is imported and ``info`` is not called)."""
    global _missing
    if not (agent_wants or env_enabled()) or _missing:
        return None
    try:
        from eve_cli._tracing._otel import shared
    except ImportError as exc:
        _missing = True  # said once; the turns run untraced
        import sys

        print(
            f"eve: tracing is on but OpenTelemetry cannot be imported ({exc}); "
            "install it with: pip install 'eve-durable[otel]'",
            file=sys.stderr,
        )
        return None
    return shared().turn(info())


_missing = False  # the SDK was found missing once


def shutdown() -> None:
    """Export what is pending and forget the exporter (the next traced turn makes one
    afresh from the environment). Called at process exit; tests call it between runs."""
    import sys

    module = sys.modules.get("eve_cli._tracing._otel")
    if module is not None:
        module.close_shared()


def _digest(*parts: str, size: int) -> int:
    data = "\x1f".join(parts).encode()
    value = int.from_bytes(hashlib.blake2b(data, digest_size=size).digest(), "big")
    return value or 1  # an all-zero id is invalid


def trace_id(session_id: str, turn_id: str) -> int:
    """The 128-bit trace id of a turn."""
    return _digest("eve-trace", session_id, turn_id, size=16)


def span_id(session_id: str, turn_id: str, part: str) -> int:
    """The 64-bit span id of a part of a turn (``turn``, ``step:<index>``)."""
    return _digest("eve-span", session_id, turn_id, part, size=8)


def annotate(**attributes: Any) -> None:
    """Set attributes on the span of the action running now (a no-op when none is traced):
    for code inside an action that knows more than its name says (an MCP call's server)."""
    import sys

    module = sys.modules.get("eve_cli._tracing._otel")
    if module is not None:
        module.annotate_current(attributes)
