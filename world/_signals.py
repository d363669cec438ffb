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
