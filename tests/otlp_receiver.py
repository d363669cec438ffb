"""A real OTLP/HTTP trace receiver on 127.0.0.1 for the tracing tests: it decodes each
`POST /v1/traces` (protobuf `ExportTraceServiceRequest`, as the standard exporter sends it)
into :class:`Span` records and keeps the raw bodies (to look for secrets in)."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    status: int  # 0 unset, 1 ok, 2 error
    service: str


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


class Receiver:
    """Collects the spans exported to ``url`` (give it as OTEL_EXPORTER_OTLP_ENDPOINT)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._take(self.path, body, request)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    def _take(self, path: str, body: bytes, request: Any) -> None:
        spans = []
        for resource in request.resource_spans:
            attrs = {a.key: _value(a.value) for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for s in scope.spans:
                    spans.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            status=s.status.code,
                            service=str(attrs.get("service.name")),
                        )
                    )
        with self._changed:
            self.paths.append(path)
            self.bodies.append(body)
            self.spans.extend(spans)
            self._changed.notify_all()

    def wait_for(self, check: Callable[[list[Span]], bool], timeout: float = 20.0) -> list[Span]:
        """The spans once ``check`` accepts them (AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not check(self.spans):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = [s.name for s in self.spans]
                    raise AssertionError(f"spans not as awaited in {timeout} s: {names}")
                self._changed.wait(left)
            return list(self.spans)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1; this process's (and its children's) exporter sends to it.
    (Tests' conftests import this fixture.)"""
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from eve_cli import _tracing

    server = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # ms: spans leave at once
    for name in (_tracing.ENV, _tracing.CONTENT_ENV, "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    yield server
    _tracing.shutdown()  # the next test's exporter reads its own environment
    server.stop()
