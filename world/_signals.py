"""In-process wake-ups for the worlds that notify their own waiters (memory, PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class Signals:
    """Wakes coroutines, in any thread's event loop, waiting on a key (`fire(None)`: all)."""

    def __init__(self) -> None:
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._lock = threading.Lock()

    def event(self, key: str) -> asyncio.Event:
        event = asyncio.Event()
        with self._lock:
            self._waiters.setdefault(key, []).append((asyncio.get_running_loop(), event))
        return event

    def drop(self, key: str, event: asyncio.Event) -> None:
        with self._lock:
            waiters = self._waiters.get(key, [])
            waiters[:] = [(loop, e) for loop, e in waiters if e is not event]
            if not waiters:
                self._waiters.pop(key, None)

    def fire(self, key: str | None) -> None:
        with self._lock:
            if key is None:
                waiters = [w for ws in self._waiters.values() for w in ws]
            else:
                waiters = list(self._waiters.get(key, []))
        for loop, event in waiters:
            if not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                    loop.call_soon_threadsafe(event.set)


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to `timeout` seconds for `event`: whether it was set. A cancellation of the
    caller always goes through (3.11's `asyncio.wait_for` returns the result of a wait that
    ended just as its caller was cancelled, and a tail cancelled so would go on forever)."""
    try:
        async with asyncio.timeout(max(timeout, 0.0)):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
