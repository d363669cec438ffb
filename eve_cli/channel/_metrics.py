"""`/metrics`: what one `eve start` worker did and holds, in the Prometheus text format.

Counters and histograms come from the events this process stores (a replayed event is not
counted again, so a resumed turn is counted once) and from the server's own parts: receipts,
takeovers, lost leases, schedule ticks. Gauges of sessions by status are read from the world
when scraped (at most once every :data:`GAUGE_TTL` seconds: a listing reads every head). The
registry is private: a program embedding eve keeps its own global one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from eve_cli.execution import observe_events

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GAUGE_TTL = 5.0
_ENDS = {"turn.completed": "completed", "turn.failed": "failed", "turn.cancelled": "cancelled"}
# Where a step's model call ends: its answer's tool calls, or its text when it asked for none.
_ANSWERED = ("actions.requested", "message.completed")
_TOKEN_KINDS = (
    ("inputTokens", "input"),
    ("outputTokens", "output"),
    ("cacheReadTokens", "cache_read"),
    ("cacheWriteTokens", "cache_write"),
    ("reasoningTokens", "reasoning"),
)
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ServerMetrics:
    """The metrics of one server process (see the module's docstring)."""

    def __init__(
        self,
        sessions: Callable[[], Sequence[Mapping[str, Any]]],
        with_work: Callable[[], Sequence[str]],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turns_started = Counter("eve_turns_started", "Turns started", registry=r)
        self.turns_ended = Counter("eve_turns_ended", "Turns ended", ["status"], registry=r)
        self.steps = Counter("eve_steps", "Steps ended", ["status"], registry=r)
        self.tokens = Counter("eve_tokens", "Model tokens", ["kind"], registry=r)
        self.cost = Counter("eve_cost_dollars", "Model cost by the price table", registry=r)
        self.model_seconds = Histogram(
            "eve_model_call_seconds", "A step's model call", buckets=_SECONDS, registry=r
        )
        self.tool_seconds = Histogram(
            "eve_tool_call_seconds", "A tool call", ["tool"], buckets=_SECONDS, registry=r
        )
        self.deliveries = Counter(
            "eve_deliveries", "Messages delivered, by receipt", ["disposition"], registry=r
        )
        self.takeovers = Counter(
            "eve_takeovers", "Sessions taken over from a worker that drove none", registry=r
        )
        self.lease_losses = Counter(
            "eve_lease_losses", "Drives stopped: another worker holds the session", registry=r
        )
        self.schedule_ticks = Counter(
            "eve_schedule_ticks", "Schedule ticks", ["outcome"], registry=r
        )
        r.register(_SessionGauges(sessions, with_work))
        self._model_began: dict[tuple[str, Any, Any], float] = {}
        self._lock = threading.Lock()

    def observe(self, session_id: str, kind: str, event: Mapping[str, Any]) -> None:
        """Count one event this process stored (`observe_events` calls it)."""
        if kind == "turn.started":
            self.turns_started.inc()
        elif kind in _ENDS:
            self.turns_ended.labels(_ENDS[kind]).inc()
        elif kind == "step.started":
            with self._lock:
                self._model_began[_step(session_id, event)] = time.monotonic()
        elif kind in _ANSWERED:
            with self._lock:
                began = self._model_began.pop(_step(session_id, event), None)
            if began is not None:
                self.model_seconds.observe(time.monotonic() - began)
        elif kind in ("step.completed", "step.failed"):
            self._step_ended(session_id, kind, event)
        elif kind == "action.result" and isinstance(event.get("durationMs"), int):
            tool = str(event.get("name") or "?")
            self.tool_seconds.labels(tool).observe(event["durationMs"] / 1000)

    def _step_ended(self, session_id: str, kind: str, event: Mapping[str, Any]) -> None:
        with self._lock:
            self._model_began.pop(_step(session_id, event), None)
        self.steps.labels(kind.removeprefix("step.")).inc()
        usage = event.get("usage")
        if isinstance(usage, Mapping):
            for field, name in _TOKEN_KINDS:
                if isinstance(count := usage.get(field), int) and count > 0:
                    self.tokens.labels(name).inc(count)
        if isinstance(cost := event.get("cost"), int | float) and cost > 0:
            self.cost.inc(cost)

    def watch(self) -> Callable[[], None]:
        """Start counting the events of this process; returns the call that stops it."""
        return observe_events(self.observe)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _step(session_id: str, event: Mapping[str, Any]) -> tuple[str, Any, Any]:
    return session_id, event.get("turnId"), event.get("stepIndex")


class _SessionGauges(Collector):
    """Sessions by status and those with work waiting, read from the world when scraped."""

    def __init__(
        self,
        sessions: Callable[[], Sequence[Mapping[str, Any]]],
        with_work: Callable[[], Sequence[str]],
    ) -> None:
        self._sessions, self._with_work = sessions, with_work
        self._kept: tuple[float, list[Metric]] | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if self._kept is None or time.monotonic() - self._kept[0] > GAUGE_TTL:
                self._kept = (time.monotonic(), self._read())
            return list(self._kept[1])

    def describe(self) -> Iterable[Metric]:
        return [
            GaugeMetricFamily("eve_sessions", "Sessions by status", labels=["status"]),
            GaugeMetricFamily("eve_sessions_with_work", "Sessions with work waiting"),
        ]

    def _read(self) -> list[Metric]:
        by_status = GaugeMetricFamily("eve_sessions", "Sessions by status", labels=["status"])
        counts = Tally(str(row.get("status")) for row in self._sessions())
        for status, count in sorted(counts.items()):
            by_status.add_metric([status], count)
        waiting = GaugeMetricFamily("eve_sessions_with_work", "Sessions with work waiting")
        waiting.add_metric([], len(self._with_work()))
        return [by_status, waiting]
