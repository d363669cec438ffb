"""Where finished spans go, as ``OTEL_TRACES_EXPORTER`` says, without delaying an exit.

``otlp`` (the default) sends them over OTLP/HTTP, ``console`` writes them to stderr (stdout
stays the command's: ``eve chat -p`` and ``--json`` are read by programs), ``none`` drops them;
a comma-separated list combines them. A collector that is absent or silent must not hold a
command at exit: whatever is not exported within :data:`EXIT_BOUND` seconds of the close is
given up, and said in one line instead of the SDK's retry warnings.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)

EXIT_BOUND = 1.0
KINDS = ("otlp", "console", "none")
# The SDK's loggers that say each retry of an export (one line each, then a failure line).
_SDK_LOGGERS = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.sdk.trace.export",
)


def chosen_kinds(value: str | None = None) -> tuple[list[str], list[str]]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``), and the unknown ones."""
    raw = os.environ.get("OTEL_TRACES_EXPORTER", "otlp") if value is None else value
    names = [part.strip().lower() for part in raw.split(",") if part.strip()] or ["otlp"]
    return [n for n in names if n in KINDS], [n for n in names if n not in KINDS]


class _Counted(SpanExporter):
    """An exporter that counts the spans it could not deliver and stops once told to."""

    def __init__(self, inner: SpanExporter, where: str) -> None:
        self.inner = inner
        self.where = where
        self.dropped = 0
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._stopped.is_set():
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        result = self.inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self.dropped += len(spans)
        return result

    def stop(self) -> None:
        """End a retry in progress (the inner exporter's shutdown interrupts its backoff)."""
        with self._lock:
            if not self._stopped.is_set():
                self._stopped.set()
                self.inner.shutdown()

    def shutdown(self) -> None:
        self.stop()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _Quiet(logging.Filter):
    """Drops the SDK's per-retry lines while eve's exporter stands in with one of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


class Delivery:
    """The span processors of one provider, closed within :data:`EXIT_BOUND` seconds."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.counted: list[_Counted] = []
        kinds, unknown = chosen_kinds()
        for name in unknown:
            _say(
                f"OTEL_TRACES_EXPORTER names {name!r}, which eve does not know "
                f"(it knows {', '.join(KINDS)}): ignored"
            )
        if "otlp" in kinds:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            otlp = OTLPSpanExporter()
            self._add(_Counted(otlp, getattr(otlp, "_endpoint", "the OTLP endpoint")))
            quiet = _Quiet()
            for name in _SDK_LOGGERS:
                logging.getLogger(name).addFilter(quiet)
        if "console" in kinds:
            self._add(_Counted(ConsoleSpanExporter(out=sys.stderr), "stderr"))

    def _add(self, exporter: _Counted) -> None:
        self.counted.append(exporter)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))

    def close(self) -> None:
        """Export what the batches hold, giving up after :data:`EXIT_BOUND` seconds."""
        closing = threading.Thread(
            target=self.provider.shutdown, name="eve-otel-close", daemon=True
        )
        closing.start()
        closing.join(EXIT_BOUND * 0.8)
        late = closing.is_alive()
        if late:  # a retry's backoff or a silent collector: interrupt it, wait a little more
            for exporter in self.counted:
                exporter.stop()
            closing.join(EXIT_BOUND * 0.2)
        for exporter in self.counted:
            if exporter.dropped or (late and exporter.where != "stderr"):
                count = f"{exporter.dropped} spans" if exporter.dropped else "spans"
                _say(
                    f"{count} not exported: {exporter.where} did not take them within "
                    f"{EXIT_BOUND:g} s (is the collector running?)"
                )


def _say(line: str) -> None:
    print(f"eve: tracing: {line}", file=sys.stderr, flush=True)
