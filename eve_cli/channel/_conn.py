"""Connections of the server: a bound on the time to a request's headers, a cap on open
connections, and a log that cannot flood.

uvicorn alone waits forever for the first request on a connection, so idle sockets pile up until
the process runs out of file descriptors; `accept()` then fails in a loop that logged a
traceback per attempt (60 MB in 10 s). Here each connection must deliver a request's headers
within ``header_timeout`` of its first byte (or of being opened), and when the open connections
reach the cap (half the descriptor limit by default) the oldest one without a request in
progress is closed to make room; when every connection is busy, the new one is answered 503.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
import traceback
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# Descriptors kept for the world's files, the watcher and the listening socket.
_RESERVED_FDS = 32
_BUSY_BODY = b'{"error": {"code": "unavailable", "message": "too many open connections; retry"}}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


def default_max_connections() -> int:
    """Half of the process's descriptor limit, at least 8 (and at most 4096)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(8, min(4096, (soft - _RESERVED_FDS) // 2))


def guarded_protocol(
    header_timeout: float, max_connections: int, log: Callable[[str], None]
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the bounds above (``log`` should be a :class:`FloodGuard`)."""

    class Guarded(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._opened = time.monotonic()
            self._header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections and not _evict(self.connections, self):
                log("refused a connection: every open connection is busy (503)")
                transport.write(_BUSY)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self._between_requests():
                self._arm()  # the first byte of a new request on a kept-alive connection
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:  # a request's headers are complete
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def idle(self) -> bool:
            """No request in progress (none yet, or the last one answered)."""
            return self._between_requests()

        def _between_requests(self) -> bool:
            return (self.cycle is None or self.cycle.response_complete) and (
                self.conn.their_state in (h11.IDLE, h11.DONE)
            )

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.close()

    return Guarded


def _evict(connections: set[Any], keep: Any) -> bool:
    """Close the oldest connection without a request in progress; False when there is none."""
    idle = [c for c in connections if c is not keep and getattr(c, "idle", lambda: False)()]
    if not idle:
        return False
    oldest = min(idle, key=lambda c: c._opened)
    oldest.transport.close()
    connections.discard(oldest)
    return True


class FloodGuard:
    """A log that writes at most ``burst`` lines per ``window`` seconds and then one line
    counting what it left out."""

    def __init__(self, log: Callable[[str], None], burst: int = 20, window: float = 10.0):
        self._log = log
        self._burst = burst
        self._window = window
        self._start = 0.0
        self._written = 0
        self._dropped = 0

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self._start >= self._window:
            if self._dropped:
                self._log(f"({self._dropped} similar log lines left out in {self._window:g} s)")
            self._start, self._written, self._dropped = now, 0, 0
        if self._written < self._burst:
            self._written += 1
            self._log(line)
        else:
            self._dropped += 1


def loop_error_logger(
    log: Callable[[str], None],
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An event-loop exception handler: one line for the system's refusals (an `OSError`,
    e.g. `accept()` out of descriptors, which repeats), the traceback for anything else (a
    bug in a task nobody awaited)."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        message = str(context.get("message") or "event loop error")
        if exc is None:
            log(message)
        elif isinstance(exc, OSError):
            log(f"{message}: {type(exc).__name__}: {exc}")
        else:
            log(f"{message}:\n{''.join(traceback.format_exception(exc)).rstrip()}")

    return handle


class FloodFilter(logging.Filter):
    """A logging filter passing at most ``burst`` records per ``window`` seconds (uvicorn's
    own warnings, one per bad connection, would otherwise flood the log)."""

    def __init__(self, burst: int = 20, window: float = 10.0) -> None:
        super().__init__()
        self._burst, self._window = burst, window
        self._start, self._passed = 0.0, 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self._start >= self._window:
            left_out = self._passed - self._burst
            self._start, self._passed = now, 0
            if left_out > 0:  # said on the first record that passes again
                record.msg = f"({left_out} log records left out before this) {record.getMessage()}"
                record.args = ()
        self._passed += 1
        return self._passed <= self._burst
