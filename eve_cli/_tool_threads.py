"""The threads sync tools run on: started when needed, gone after a few idle seconds.

A parked session holds no thread (D5), so a process that ran a tool does not keep a thread
for it afterwards, as a thread pool would. A caller that may hold the event loop for a moment
waits for a quick result first: most tools finish within :data:`QUICK_WAIT`, and a result
taken that way skips the loop's wake-up from the thread (about half the cost of the hop).

Such a caller runs a tool on its own thread instead once the tool has shown it is instant:
its last :data:`INLINE_AFTER` runs made while a caller held the loop each took under
:data:`INLINE_LIMIT`. The hop to a thread
then costs more than the tool (~0.08 ms a step on these machines). It runs with the caller's
context variables and with no running event loop visible, as on a thread (so a tool that calls
``asyncio.run`` works either way). A tool that once holds the loop longer than the caller's
wait runs on threads for the rest of the process. A tool that waits for the caller's loop
(``run_coroutine_threadsafe``) never qualifies: while the caller holds the loop, such a run
takes at least the wait (and quick runs with the loop free do not count), so it cannot
deadlock by running on the loop's own thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

QUICK_WAIT = 0.002
IDLE_SECONDS = 5.0  # a tool thread waits this long for more work, then ends
MAX_THREADS = 64  # sync tool calls running at once in a process; more wait for a thread
INLINE_AFTER = 8  # quick runs in a row before a tool may run on the caller's thread
INLINE_LIMIT = 0.0005  # seconds: a run this short counts as quick

_Job = tuple["concurrent.futures.Future[Any]", Callable[[], Any]]


class ToolThreads:
    """Runs callables on daemon threads that end when idle: one per call in flight, up to
    ``most`` at once (later calls wait for a thread to finish one, as in a pool); its threads
    are named ``name``."""

    def __init__(
        self, idle: float = IDLE_SECONDS, most: int = MAX_THREADS, name: str = "eve-tool"
    ) -> None:
        self._idle_seconds = idle
        self._name = name
        self._most = most
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._idle = 0  # threads waiting for a job and not yet promised one
        self._threads = 0  # threads alive
        self._waiting = 0  # jobs queued with no thread promised (all `most` busy)
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((future, fn))
        with self._lock:
            if self._idle > 0:
                self._idle -= 1  # a waiting thread takes it
                return future
            if self._threads >= self._most:
                self._waiting += 1  # the next thread to finish a job takes it
                return future
            self._threads += 1
        threading.Thread(target=self._work, name=self._name, daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                future, fn = self._jobs.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():  # nothing was promised to this thread: it ends
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the caller, as a pool would
                    future.set_exception(exc)
            del future, fn
            with self._lock:
                if self._waiting > 0:
                    self._waiting -= 1  # this thread takes a queued job next
                else:
                    self._idle += 1


_THREADS = ToolThreads()
# Per tool function: how many of its latest runs in a row were quick; NEVER once it held the
# loop too long. Functions of a reloaded agent are new objects: they start again from 0.
_QUICK: dict[Callable[..., Any], int] = {}
_NEVER = -1


async def run_sync(fn: Callable[..., Any], kwargs: dict[str, Any], wait: float = 0.0) -> Any:
    """``fn(**kwargs)`` on a tool thread (with the caller's context variables), waited for up
    to ``wait`` seconds holding the event loop, then awaited; with ``wait``, on the caller's
    thread once ``fn`` has proven instant (see the module's docstring)."""
    context = contextvars.copy_context()
    quick = _QUICK.get(fn, 0)
    if wait > 0 and quick >= INLINE_AFTER:
        return _inline(fn, kwargs, context, wait)
    took: list[float] = []
    future = _THREADS.submit(functools.partial(_timed, took, context, fn, kwargs))
    try:
        if wait > 0:
            try:
                return future.result(timeout=wait)
            except concurrent.futures.TimeoutError:
                pass
        return await asyncio.wrap_future(future)
    finally:
        # Only a run made while the caller held the loop proves a tool instant: one that
        # needs the loop (a bridge back to it) is quick only when the loop is free.
        if quick != _NEVER and took and (wait > 0 or took[0] >= INLINE_LIMIT):
            _remember(fn, quick + 1 if took[0] < INLINE_LIMIT else 0)


def _timed(
    took: list[float],
    context: contextvars.Context,
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
) -> Any:
    started = time.perf_counter()
    try:
        return context.run(fn, **kwargs)
    finally:
        took.append(time.perf_counter() - started)


def _inline(
    fn: Callable[..., Any], kwargs: dict[str, Any], context: contextvars.Context, wait: float
) -> Any:
    loop = asyncio.get_running_loop()
    asyncio._set_running_loop(None)  # as on a thread: the tool sees no running loop
    started = time.perf_counter()
    try:
        return context.run(fn, **kwargs)
    finally:
        asyncio._set_running_loop(loop)
        took = time.perf_counter() - started
        if took > wait:
            _remember(fn, _NEVER)  # it held the loop: threads from now on
        elif took >= INLINE_LIMIT:
            _remember(fn, 0)


def _remember(fn: Callable[..., Any], quick: int) -> None:
    if len(_QUICK) >= 4096 and fn not in _QUICK:
        _QUICK.clear()
    _QUICK[fn] = min(quick, INLINE_AFTER) if quick != _NEVER else _NEVER
