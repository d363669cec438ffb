"""Where a storage call runs: the one place that decides whether a call made from an event
loop runs inline or on a thread (`Placement`, by how the store's calls wait: `IO`), and the
threads it runs on (`offload`). The engine makes every storage call of a drive through it,
and the commit queue's timer makes a network store's commits on the same threads.

Off the loop, while one family waits for its fsync or round trip the loop drives the others
(and serves HTTP), and their waits overlap (a filesystem merges concurrent fsyncs into one
journal commit: a group commit). While one family is driven there is nothing to overlap, and
a hop to a thread and back costs ~0.07 ms of the loop's time: a disk store's calls are then
made inline, and so are a network store's while its round trips are quick (`Placement`).

A network store's call made inline must not wait longer than its round trip: where it would
(a retry after a broken connection), or where it is a write that could not be made again
(one that names itself with a fresh token), it raises `WouldWait` before waiting, with
nothing of it lost, and the call is made again from its start on a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ._store import IO

T = TypeVar("T")

_IO_THREADS = 32
_io_pool: ThreadPoolExecutor | None = None


def pool() -> ThreadPoolExecutor:
    """The threads storage calls made off the loop run on."""
    global _io_pool
    if _io_pool is None:
        _io_pool = ThreadPoolExecutor(_IO_THREADS, thread_name_prefix="eve-io")
    return _io_pool


# Seconds the loop waits at most for a network store's call made off it while it drives one
# family, before it goes on and is woken by the call's end (a wake-up from the thread: ~40 us
# a call); a call that took less counts as quick.
QUICK_WAIT = 0.002
QUICK_AFTER = 8  # quick calls in a row before a network store's calls are made inline

_INLINE: contextvars.ContextVar[bool] = contextvars.ContextVar("eve_inline", default=False)


class WouldWait(BaseException):
    """Raised by a network store's call made inline on the loop (`inline()`) instead of
    waiting there, or instead of a write it could not make again: nothing of the call is
    lost, and the engine makes it again from its start on a thread. A BaseException, so that
    no handler of the store's failures takes it for one."""


def inline() -> bool:
    """Whether the current storage call is made inline on an event loop by the engine (a
    network store then raises `WouldWait` rather than wait, or than make a write it could not
    make again)."""
    return _INLINE.get()


class Placement:
    """Where one engine makes its storage calls from the loop: a memory store's inline; a
    disk store's inline while one family is driven, on threads while several are (their
    fsyncs overlap); a network store's on threads while several are driven, and while one
    is, inline once its last `QUICK_AFTER` calls each took under `QUICK_WAIT` (until one
    does not; a call that would wait inline raises `WouldWait` and is made on a thread),
    else on a thread the loop waits up to `QUICK_WAIT` for (a quick result then needs no
    wake-up from the thread).

    Inline, a round trip holds the loop as long as the quick wait already did, and saves the
    hop: ~0.07 ms of the loop's time a call, ~9% of a PostgreSQL text step's
    (`python -m benchmarks postgres`)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock  # what a call's time is measured by
        self._quick = 0  # a network store's calls in a row that took under QUICK_WAIT

    @staticmethod
    def inline(io: IO, driving: int) -> bool:
        """Whether `call` makes its call inline, as it is (a caller may then make it itself,
        without a coroutine: a disk store's record, twice a step)."""
        return io is IO.MEMORY or (io is IO.DISK and driving < 2)

    async def call(
        self, io: IO, driving: int, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T:
        """`fn(*args, **kwargs)` where it runs best; the caller goes on once it returned."""
        if self.inline(io, driving):
            return fn(*args, **kwargs)
        if io is not IO.NETWORK or driving >= 2:
            return await offload(fn, *args, **kwargs)
        started = self._clock()
        if self._quick >= QUICK_AFTER:
            token = _INLINE.set(True)
            try:
                result = fn(*args, **kwargs)
            except WouldWait:
                pass  # made again below: its time there says whether the store is still quick
            else:
                self._took(self._clock() - started)
                return result
            finally:
                _INLINE.reset(token)
        result = await offload(fn, *args, wait=QUICK_WAIT, **kwargs)
        self._took(self._clock() - started)
        return result

    def _took(self, seconds: float) -> None:
        self._quick = self._quick + 1 if seconds < QUICK_WAIT else 0


async def offload(fn: Callable[..., T], *args: Any, wait: float = 0.0, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on one of the threads; the caller goes on once it returned (the
    loop first waits up to `wait` seconds for it). A cancellation first waits
    for the call to end (a lease must not be released under a write in flight), then goes
    through: the write may be durable without the caller knowing, as after a crash at that
    moment, which replay repairs."""
    # The pool's future tells a loop future of its own from the pool's thread (not
    # `run_in_executor` and `shield`: their chained futures cost ~30 us more a call, and a
    # network store makes one a step).
    loop = asyncio.get_running_loop()
    # In the caller's context: a store knows a drive's own reads by it (`_world.DRIVING`).
    call = pool().submit(contextvars.copy_context().run, fn, *args, **kwargs)
    if wait > 0.0:
        with contextlib.suppress(TimeoutError):
            return call.result(wait)
    done: asyncio.Future[T] = loop.create_future()
    call.add_done_callback(functools.partial(_relay, loop, done))
    try:
        return await done
    except asyncio.CancelledError:
        if not done.cancelled():
            raise  # the call's own CancelledError, not the caller's cancellation
        ended = asyncio.wrap_future(call)
        while not ended.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({ended})
        if not ended.cancelled():
            ended.exception()  # retrieved: the cancellation is what the caller sees
        raise


def _relay(loop: asyncio.AbstractEventLoop, done: asyncio.Future[T], call: Future[T]) -> None:
    """On the pool's thread: hand `call`'s outcome to the loop's future `done`."""
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits
        loop.call_soon_threadsafe(_settle, done, call)


def _settle(done: asyncio.Future[T], call: Future[T]) -> None:
    if done.cancelled():
        return  # the caller went on (see `offload`)
    if call.cancelled():
        done.cancel()
    elif (exc := call.exception()) is not None:
        done.set_exception(exc)
    else:
        done.set_result(call.result())
