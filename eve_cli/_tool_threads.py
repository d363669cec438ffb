"""The threads sync tools run on: started when needed, gone after a few idle seconds.

A parked session holds no thread (D5), so a process that ran a tool does not keep a thread
for it afterwards, as a thread pool would. A caller that may hold the event loop for a moment
waits for a quick result first: most tools finish within :data:`QUICK_WAIT`, and a result
taken that way skips the loop's wake-up from the thread (about half the cost of the hop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

QUICK_WAIT = 0.002
IDLE_SECONDS = 5.0  # a tool thread waits this long for more work, then ends

_Job = tuple["concurrent.futures.Future[Any]", Callable[[], Any]]


class ToolThreads:
    """Runs callables on daemon threads that end when idle (at most one per call in flight)."""

    def __init__(self, idle: float = IDLE_SECONDS) -> None:
        self._idle_seconds = idle
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._idle = 0  # threads waiting for a job and not yet promised one
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((future, fn))
        with self._lock:
            if self._idle > 0:
                self._idle -= 1  # a waiting thread takes it
                return future
        threading.Thread(target=self._work, name="eve-tool", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                future, fn = self._jobs.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():  # nothing was promised to this thread: it ends
                        self._idle -= 1
                        return
                continue
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the caller, as a pool would
                    future.set_exception(exc)
            del future, fn
            with self._lock:
                self._idle += 1


_THREADS = ToolThreads()


async def run_sync(fn: Callable[..., Any], kwargs: dict[str, Any], wait: float = 0.0) -> Any:
    """``fn(**kwargs)`` on a tool thread (with the caller's context variables), waited for up
    to ``wait`` seconds holding the event loop, then awaited."""
    context = contextvars.copy_context()
    future = _THREADS.submit(functools.partial(context.run, fn, **kwargs))
    if wait > 0:
        try:
            return future.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            pass
    return await asyncio.wrap_future(future)
