"""Where a storage call runs: the one place that decides whether a call made from an event
loop runs inline or on a thread (`runs_inline`, by how the store's calls wait: `IO`), and
the threads it runs on (`offload`). The engine makes every storage call of a drive through
it, and the commit queue's timer makes a network store's commits on the same threads.

Off the loop, while one family waits for its fsync or round trip the loop drives the others
(and serves HTTP), and their waits overlap (a filesystem merges concurrent fsyncs into one
journal commit: a group commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
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


# Seconds the loop waits at most for a network store's call while it drives one family, before
# it goes on and is woken by the call's end (a wake-up from the thread: ~40 us a call).
QUICK_WAIT = 0.002


def quick_wait(io: IO, driving: int) -> float:
    """Seconds the loop waits for a call made off it before it goes on with other work: a
    network store's while one family is driven (there is nothing else to drive meanwhile,
    and a round trip takes less: a result taken so skips the loop's wake-up), else none."""
    return QUICK_WAIT if io is IO.NETWORK and driving < 2 else 0.0


def runs_inline(io: IO, driving: int) -> bool:
    """Whether a storage call of a store whose calls wait as `io` says is made inline on the
    loop, `driving` families being driven: a memory store's always, a disk store's while one
    family is driven (a thread hop costs ~0.1 ms, and there is nothing to overlap), a network
    store's never."""
    return io is IO.MEMORY or (io is IO.DISK and driving < 2)


async def offload(fn: Callable[..., T], *args: Any, wait: float = 0.0, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on one of the threads; the caller goes on once it returned (the
    loop first waits up to `wait` seconds for it: `quick_wait`). A cancellation first waits
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
