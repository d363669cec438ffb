"""A real HTTP server on 127.0.0.1, scripted per test, for the provider tests.

Each test queues replies; the server answers requests with them in order and records what it
saw. A reply streams its chunks with chunked transfer encoding and can pause or stall (hold the
connection open, silent, until the test ends) between chunks.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eve_cli.models import Model, ModelError, ModelRequest, ModelResponse

STALL = "stall"  # a chunk item: stop sending and keep the connection open


@dataclass
class Reply:
    """One scripted answer: a status, headers, then ``chunks`` (bytes, a pause in seconds as a
    float, or :data:`STALL`) sent chunked, or a whole ``body``."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes | float | str] = field(default_factory=list)
    body: bytes | None = None
    content_type: str = "text/event-stream"


@dataclass
class Seen:
    """A request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


class ScriptServer:
    """The server; ``url`` is its base address (``http://127.0.0.1:PORT``)."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Seen] = []
        self.release = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    def add(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up on a stalled or failed stream is expected here; anything else not.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _handler_for(server: ScriptServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            body = json.loads(raw) if raw else {}
            server.requests.append(Seen(self.path, headers, body, time.monotonic()))
            reply = server.replies.popleft() if server.replies else Reply(500, body=b"unscripted")
            try:
                self._answer(reply)
            except OSError:
                self.close_connection = True  # the client hung up (e.g. after a stall)

        def _answer(self, reply: Reply) -> None:
            self.send_response(reply.status)
            ctype = reply.content_type if reply.body is None else "application/json"
            self.send_header("content-type", ctype)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.body is not None:
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                return
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            for item in reply.chunks:
                if item == STALL:
                    self.close_connection = True
                    server.release.wait(timeout=30)
                    return
                if isinstance(item, float):
                    time.sleep(item)
                    continue
                assert isinstance(item, bytes)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(item), item))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE event: ``data`` as JSON (or as is when a str)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


class Sleeps:
    """Records the waits a policy asks for and waits only a moment (keeps tests fast)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


def generate(model: Model, request: ModelRequest) -> tuple[ModelResponse, list[str]]:
    """Run one call on a fresh event loop; returns the response and the deltas forwarded."""
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    async def main() -> ModelResponse:
        try:
            return await model.generate(request, on_delta)
        finally:
            await model.aclose()

    return asyncio.run(main()), deltas


def failure(model: Model, request: ModelRequest) -> ModelError:
    """Run one call that must fail; returns its error."""
    try:
        generate(model, request)
    except ModelError as err:
        return err
    raise AssertionError("the call succeeded")
