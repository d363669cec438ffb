"""The OpenTelemetry side of :mod:`eve_cli._tracing` (imported only when a turn traces).

One :class:`Exporter` per process: a private ``TracerProvider`` (eve does not take over the
global one of a program embedding it) with the exporters ``OTEL_TRACES_EXPORTER`` names behind
batch processors (:mod:`._export`), configured by the standard ``OTEL_*`` variables. One
:class:`TurnTrace` per run of a turn in a process: it sees the turn's events as the host writes
them (replayed ones too, which is how a resumed run learns where the turn stood) and wraps its
durable actions.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.util.types import AttributeValue

from eve_cli._events import Event
from eve_cli._json import JSONObject
from eve_cli._keys import Key
from eve_cli._tracing import _TRUE, CONTENT_ENV, TurnInfo, span_id, trace_id
from eve_cli._tracing._export import Delivery
from eve_cli._version import __version__
from eve_cli.models import DeltaCallback, Model, ModelRequest, ModelResponse

# Ids the next span started in this context gets (trace, span); unset: random ones.
_CHOSEN: ContextVar[tuple[int, int] | None] = ContextVar("eve_chosen_ids", default=None)


class _Ids(IdGenerator):
    """Random ids, except where :data:`_CHOSEN` names them (a turn's and a step's spans)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        chosen = _CHOSEN.get()
        return chosen[1] if chosen else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        chosen = _CHOSEN.get()
        return chosen[0] if chosen else self._random.generate_trace_id()


class Exporter:
    """The process's tracer provider and its exporters."""

    def __init__(self) -> None:
        # A service name of the environment's wins; eve's is only the default.
        named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        resource = Resource.create({} if named else {"service.name": "eve"})
        self.provider = TracerProvider(resource=resource, id_generator=_Ids())
        self.delivery = Delivery(self.provider)  # OTEL_TRACES_EXPORTER's choice
        self.tracer = self.provider.get_tracer("eve_cli", __version__)
        self.content = os.environ.get(CONTENT_ENV, "").strip().lower() in _TRUE

    def turn(self, info: TurnInfo) -> TurnTrace:
        return TurnTrace(self, info)

    def close(self) -> None:
        self.delivery.close()  # exports what the batches hold, bounded


_SHARED: Exporter | None = None
_LOCK = threading.Lock()


def shared() -> Exporter:
    """The process's exporter (made on first use; flushed at exit)."""
    global _SHARED
    with _LOCK:
        if _SHARED is None:
            _SHARED = Exporter()
            atexit.register(close_shared)
        return _SHARED


def close_shared() -> None:
    global _SHARED
    with _LOCK:
        exporter, _SHARED = _SHARED, None
    if exporter is not None:
        exporter.close()


@dataclass
class _Running:
    """The action whose span is current (see :func:`annotate_current`)."""

    trace: TurnTrace
    span: Span
    kind: str


_CURRENT: ContextVar[_Running | None] = ContextVar("eve_traced_action", default=None)

# Durable action names (`<prefix>:<rest>`) → the span kind their run gets.
# Durable actions' kinds (the name before ``:``), and the MCP servers' start-up before a turn's
# first model call (not an action: a replay does not start them).
ACTION_KINDS = {
    "model": "chat",
    "tool": "execute_tool",
    "compact": "compaction",
    "mcp": "mcp_tools",
}


def annotate_current(attributes: dict[str, AttributeValue]) -> None:
    running = _CURRENT.get()
    if running is not None:
        running.span.set_attributes(attributes)


def _ns(seconds: float | None) -> int:
    return int((seconds if seconds is not None else time.time()) * 1e9)


def _provider_and_model(model: str) -> tuple[str, str]:
    provider, sep, name = model.partition(":")
    return (provider, name) if sep else ("eve", model)


class TurnTrace:
    """The spans of one turn's run in this process."""

    def __init__(self, exporter: Exporter, info: TurnInfo) -> None:
        self.exporter = exporter
        self.info = info
        self.trace_id = trace_id(info.session_id, info.turn_id)
        self.turn_span = span_id(info.session_id, info.turn_id, "turn")
        self.provider, self.model_name = _provider_and_model(info.model)
        self.step: int | None = None
        self.turn_started: float | None = None
        self.step_started: dict[int, float | None] = {}
        self.step_usage: dict[int, tuple[int, int]] = {}
        self.cost = 0.0  # dollars, from the steps' recorded costs
        self.calls: dict[str, tuple[str, Any]] = {}
        self.enduser: str | None = None  # who sent the turn's message (SPEC §18)

    # -- events -----------------------------------------------------------------------

    def event(self, kind: str, key: Key, event: Event, fresh: bool) -> None:
        """The host wrote ``event`` under ``key`` (``fresh``: stored just now; else a
        replay of one stored earlier, maybe by another process)."""
        at = time.time() if fresh else None
        if kind == "turn.started":
            self.turn_started = at if fresh else self.info.stored_at(key)
        elif kind == "message.received" and isinstance(event.get("by"), dict):
            self.enduser = str(event["by"].get("subject"))
        elif kind == "step.started":
            self.step = int(event["stepIndex"])
            self.step_started[self.step] = at if fresh else self.info.stored_at(key)
        elif kind == "actions.requested":
            for action in event.get("actions") or []:
                self.calls[str(action.get("callId"))] = (
                    str(action.get("name")),
                    action.get("arguments"),
                )
        elif kind in ("step.completed", "step.failed"):
            self._step_ended(event, fresh)
        elif kind in ("turn.completed", "turn.failed", "turn.cancelled") and fresh:
            self._end_turn(kind.split(".")[1], event.get("error"))

    def _step_ended(self, event: Mapping[str, Any], fresh: bool) -> None:
        index = int(event["stepIndex"])
        usage = event.get("usage") or {}
        self.step_usage[index] = (
            int(usage.get("inputTokens") or 0),
            int(usage.get("outputTokens") or 0),
        )
        if isinstance(event.get("cost"), int | float):
            self.cost += float(event["cost"])
        if fresh:
            self._end_step(index, event.get("error"))

    def _end_step(self, index: int, error: Any) -> None:
        start = self.step_started.get(index)
        if start is None:  # its start was stored by an earlier run: read it
            start = self.info.stored_at(self.info.turn.step(index).start)
        tokens_in, tokens_out = self.step_usage.get(index, (0, 0))
        attributes = {
            **self._scope(),
            "eve.step.index": index,
            "gen_ai.usage.input_tokens": tokens_in,
            "gen_ai.usage.output_tokens": tokens_out,
        }
        with self._chosen(span_id(self.info.session_id, self.info.turn_id, f"step:{index}")):
            span = self.exporter.tracer.start_span(
                f"step {self.info.turn_id}.{index}",
                context=self._parent(self.turn_span),
                attributes=attributes,
                start_time=_ns(start),
            )
        _fail(span, error, "step_failed")
        span.end()

    def _end_turn(self, status: str, error: Any) -> None:
        start = self.turn_started
        if start is None:
            start = self.info.stored_at(self.info.turn.start)
        attributes = {
            **self._scope(),
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.info.agent,
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model_name,
            "gen_ai.usage.input_tokens": sum(u[0] for u in self.step_usage.values()),
            "gen_ai.usage.output_tokens": sum(u[1] for u in self.step_usage.values()),
            "eve.turn.status": status,
            "eve.turn.steps": len(self.step_usage),
        }
        if self.cost:
            attributes["eve.turn.cost_usd"] = round(self.cost, 9)
        with self._chosen(self.turn_span):
            span = self.exporter.tracer.start_span(
                f"invoke_agent {self.info.agent}",
                context=otel_context.Context(),  # a root span: the turn is its own trace
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                start_time=_ns(start),
            )
        _fail(span, error, "turn_failed")
        span.end()

    # -- actions ----------------------------------------------------------------------

    def action(self, name: str, fn: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        """``fn`` (the body of durable action ``name``) run inside its span; it runs only
        when the action really runs (a replay returns the journaled result without it)."""
        kind = ACTION_KINDS.get(name.partition(":")[0])
        if kind is None:
            return fn
        step = self.step

        async def traced() -> Any:
            attributes = {**self._scope(), "gen_ai.operation.name": kind}
            if step is not None:
                attributes["eve.step.index"] = step
            title = self._title(kind, name, attributes)
            parent = (
                span_id(self.info.session_id, self.info.turn_id, f"step:{step}")
                if step is not None
                else self.turn_span
            )
            with self.exporter.tracer.start_as_current_span(
                title,
                context=self._parent(parent),
                kind=SpanKind.CLIENT if kind == "chat" else SpanKind.INTERNAL,
                attributes=attributes,
            ) as span:
                token = _CURRENT.set(_Running(self, span, kind))
                try:
                    result = await fn()
                finally:
                    _CURRENT.reset(token)
                self._settled(kind, name, span, result)
                return result

        return traced

    def _title(self, kind: str, name: str, attributes: dict[str, AttributeValue]) -> str:
        if kind == "chat":
            attributes["gen_ai.provider.name"] = self.provider
            attributes["gen_ai.request.model"] = self.model_name
            return f"chat {self.model_name}"
        if kind == "execute_tool":
            call_id = name.partition(":")[2]
            tool, arguments = self.calls.get(call_id, ("?", None))
            attributes.update(
                {
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.id": call_id,
                    "gen_ai.tool.type": "function",
                }
            )
            if self.exporter.content:
                attributes["gen_ai.tool.call.arguments"] = _text(arguments)
            return f"execute_tool {tool}"
        if kind == "mcp_tools":
            return "mcp tools"  # the servers started (or asked) for their tools
        return "compaction"

    def _settled(self, kind: str, name: str, span: Span, result: Any) -> None:
        if not isinstance(result, dict):
            return
        if kind == "execute_tool":
            if self.exporter.content:
                span.set_attribute("gen_ai.tool.call.result", _text(result.get("content")))
            if result.get("isError"):
                span.set_attribute("error.type", "tool_error")
                span.set_status(Status(StatusCode.ERROR))
        elif "error" in result:
            _fail(span, result["error"], "model_error")

    def model_done(self, running: _Running, request: ModelRequest, response: ModelResponse) -> None:
        """A model call of the running action answered (its usage and finish reason)."""
        span = running.span
        usage = response.usage
        attributes: dict[str, AttributeValue] = {
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.response.model": self.model_name,
        }
        for name, value in (
            ("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens),
            ("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens),
            ("eve.usage.reasoning_tokens", usage.reasoning_tokens),
        ):
            if value:
                attributes[name] = value
        if response.stop_reason:
            attributes["gen_ai.response.finish_reasons"] = (response.stop_reason,)
        if running.kind == "compaction":
            attributes["gen_ai.request.model"] = self.model_name
        if self.exporter.content and running.kind == "chat":
            attributes["gen_ai.system_instructions"] = request.system or ""
            attributes["gen_ai.input.messages"] = _text(request.messages)
            out: JSONObject = {"role": "assistant", "content": response.text}
            if response.tool_calls:
                out["tool_calls"] = [
                    {"id": c.id, "name": c.name, "arguments": c.arguments}
                    for c in response.tool_calls
                ]
            attributes["gen_ai.output.messages"] = _text([out])
        span.set_attributes(attributes)

    def model(self, model: Model) -> Model:
        return TracedModel(model, self)

    # -- helpers ----------------------------------------------------------------------

    def _scope(self) -> dict[str, AttributeValue]:
        scope: dict[str, AttributeValue] = {
            "gen_ai.conversation.id": self.info.session_id,
            "eve.session.id": self.info.session_id,
            "eve.turn.id": self.info.turn_id,
        }
        if self.enduser is not None:
            scope["enduser.id"] = self.enduser
        return scope

    def _parent(self, parent_span: int) -> otel_context.Context:
        remote = SpanContext(
            self.trace_id, parent_span, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )
        return trace.set_span_in_context(NonRecordingSpan(remote), otel_context.Context())

    @contextmanager
    def _chosen(self, span: int) -> Iterator[None]:
        token = _CHOSEN.set((self.trace_id, span))
        try:
            yield
        finally:
            _CHOSEN.reset(token)


class TracedModel(Model):
    """A model whose answers annotate the span of the action calling it."""

    def __init__(self, inner: Model, trace_: TurnTrace) -> None:
        self.inner = inner
        self.trace = trace_
        self.name = inner.name
        self.context_window = inner.context_window

    async def generate(
        self,
        request: ModelRequest,
        on_delta: DeltaCallback | None = None,
        on_reasoning: DeltaCallback | None = None,
    ) -> ModelResponse:
        response = await self.inner.generate(request, on_delta, on_reasoning)
        running = _CURRENT.get()
        if running is not None:
            self.trace.model_done(running, request, response)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _fail(span: Span, error: Any, kind: str) -> None:
    if not error:
        return
    message = error.get("message") if isinstance(error, dict) else str(error)
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, str(message)[:500]))


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
