"""Event streams over HTTP: NDJSON by default, SSE when the client accepts text/event-stream.

A stream replays the session's stored events from a start index, then tails live ones (written
by any process). Heartbeats keep idle connections alive and reveal dead ones. When the client
goes away or the server shuts down, the tail is closed: no task or file handle stays behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from eve_cli._facade import ServingFacade
from eve_cli.channel._errors import ChannelError

_END = object()  # queued by the hub when the server shuts down

# Session statuses after which no event will ever be appended.
_FINAL = frozenset({"completed", "failed", "cancelled"})


class StreamHub:
    """Tracks open streams so shutdown can end every one of them cleanly."""

    def __init__(self, heartbeat: float, log: Callable[[str], None]) -> None:
        self.heartbeat = heartbeat
        self.log = log
        self._queues: set[asyncio.Queue[object]] = set()
        self._changed = asyncio.Event()
        self.closing = False

    @property
    def open_streams(self) -> int:
        """How many streams are being served now."""
        return len(self._queues)

    async def wait_idle(self) -> None:
        """Return once no stream is open (every tail closed, every pump task gone)."""
        while self._queues:
            self._changed.clear()
            await self._changed.wait()

    def close(self) -> None:
        """End every open stream after what it has already queued."""
        self.closing = True
        for queue in self._queues:
            # A full queue's consumer is busy and sees `closing` after its next event.
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(_END)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[asyncio.Queue[object]]:
        queue: asyncio.Queue[object] = asyncio.Queue(maxsize=1024)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)
            self._changed.set()


async def start_index(request: Request, runtime: ServingFacade, session_id: str, sse: bool) -> int:
    """The first index to send: ``Last-Event-ID`` + 1 (SSE reconnect) wins over ``startIndex``.

    A negative ``startIndex`` counts back from the tail (-1: the last stored event).
    """
    last_id = request.headers.get("last-event-id") if sse else None
    if last_id is not None and last_id.strip():
        try:
            return int(last_id) + 1
        except ValueError:
            raise ChannelError(
                400, f"Last-Event-ID must be an event index, got {last_id!r}"
            ) from None
    raw = request.query_params.get("startIndex", "0")
    try:
        start = int(raw)
    except ValueError:
        raise ChannelError(400, f"startIndex must be an integer, got {raw!r}") from None
    if start >= 0:
        return start
    recent = await runtime.call(runtime.events, session_id, start)
    if recent:
        return int(recent[0]["index"])
    return 0


async def stream_response(
    request: Request, runtime: ServingFacade, hub: StreamHub, session_id: str
) -> StreamingResponse:
    """The streaming answer of ``GET /eve/v1/session/{id}/stream``."""
    sse = "text/event-stream" in request.headers.get("accept", "")
    start = await start_index(request, runtime, session_id, sse)
    follow = request.query_params.get("follow", "true").lower() not in ("0", "false", "no")
    view = await runtime.call(runtime.session, session_id)
    if follow and view.get("status") in _FINAL:
        # Nothing will be appended: replay what exists and end, instead of hanging.
        follow = False
    body = _frames(runtime, hub, session_id, start, follow, sse)
    media = "text/event-stream" if sse else "application/x-ndjson"
    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(body, media_type=media, headers=headers)


async def _frames(
    runtime: ServingFacade, hub: StreamHub, session_id: str, start: int, follow: bool, sse: bool
) -> AsyncIterator[bytes]:
    # The first bytes go out at once so the client sees the headers before any event.
    yield b": eve stream\n\n" if sse else b"\n"
    if not follow:
        for event in await runtime.call(runtime.events, session_id, start):
            yield _frame(event, sse)
        return
    async with hub.open() as queue:
        pump = asyncio.get_running_loop().create_task(
            _pump(runtime, session_id, start, queue), name=f"eve-stream-{session_id}"
        )
        try:
            while not hub.closing:
                try:  # (`asyncio.timeout`: a client gone as an item came ends the stream)
                    async with asyncio.timeout(hub.heartbeat):
                        item = await queue.get()
                except TimeoutError:
                    yield b": heartbeat\n\n" if sse else b"\n"
                    continue
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    # Headers are sent: end the stream; the client resumes from its last index.
                    hub.log(f"stream of session {session_id} ended: {type(item).__name__}: {item}")
                    return
                assert isinstance(item, dict)
                yield _frame(item, sse)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump


async def _pump(
    runtime: ServingFacade, session_id: str, start: int, queue: asyncio.Queue[object]
) -> None:
    """Copy the session's tail into ``queue`` (the tail is closed when this task ends)."""
    try:
        events = runtime.tail(session_id, start)
        try:
            async for event in events:
                await queue.put(event)
        finally:
            # Closing the tail releases its file handles and watchers at once.
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        await queue.put(_END)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        await queue.put(exc)


def _frame(event: Mapping[str, Any], sse: bool) -> bytes:
    data = json.dumps(event, separators=(",", ":"), default=str)
    if sse:
        return f"id: {event.get('index', '')}\ndata: {data}\n\n".encode()
    return (data + "\n").encode()
