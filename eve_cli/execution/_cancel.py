"""In-process cancel signals: a cancel asked of this process reaches the model call in flight.

The durable cancel is the delivery in the session's inbox, honoured at the next action
boundary by whichever process drives the session. A signal only makes the process that drives
the session *and* took the cancel (Ctrl-C in `eve chat`, ``POST …/cancel`` to `eve start`)
stop a streaming model call now instead of at its end. It is fired after the delivery is
stored, so a turn that acts on it always has the durable cancel to find.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def _root(session_id: str) -> str:
    # A sub-agent's session (<root>.<n>) is cancelled with its root session.
    return session_id.split(".", 1)[0]


class CancelSignals:
    """Fired cancels by root session id, until the turn that honours them clears them."""

    def __init__(self) -> None:
        self._fired: set[str] = set()
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._storing: dict[str, set[asyncio.Future[None]]] = {}  # cancels being delivered

    def storing(self, session_id: str) -> Callable[[], None]:
        """Note that this process is storing a cancel of ``session_id``; call the function it
        returns once the delivery is stored (or refused)."""
        root = _root(session_id)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._storing.setdefault(root, set()).add(done)

        def finish() -> None:
            storing = self._storing.get(root)
            if storing is not None:
                storing.discard(done)
                if not storing:
                    del self._storing[root]
            if not done.done():
                done.set_result(None)

        return finish

    def in_flight(self, session_id: str) -> bool:
        """Whether this process is storing a cancel of ``session_id`` (see :meth:`stored`)."""
        return bool(self._storing.get(_root(session_id)))

    async def stored(self, session_id: str, timeout: float = 10.0) -> None:
        """Wait (bounded) until the cancels of ``session_id`` this process is storing are
        stored, so that an action boundary finds them: a Ctrl-C pressed during a tool must
        stop the next one even when the tool ends before the delivery is durable. Returns at
        once, without yielding to the loop, when none is in flight."""
        storing = self._storing.get(_root(session_id))
        if storing:
            await asyncio.wait(list(storing), timeout=timeout)

    def fire(self, session_id: str) -> None:
        root = _root(session_id)
        self._fired.add(root)
        for waiter in self._waiters.pop(root, set()):
            if not waiter.done():
                waiter.set_result(None)

    def fired(self, session_id: str) -> bool:
        return _root(session_id) in self._fired

    def clear(self, session_id: str) -> None:
        self._fired.discard(_root(session_id))

    def signal(self, session_id: str) -> asyncio.Future[None]:
        """A future done once a cancel of ``session_id`` (or its root) is fired (done now if
        one was); the caller cancels it when it stops waiting. Cancelled ones are dropped at
        the next call for the same root."""
        root = _root(session_id)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if root in self._fired:
            waiter.set_result(None)
            return waiter
        waiting = {w for w in self._waiters.get(root, ()) if not w.done()}
        waiting.add(waiter)
        self._waiters[root] = waiting
        return waiter

    async def wait(self, session_id: str) -> None:
        """Return once a cancel of ``session_id`` (or its root) is fired."""
        waiter = self.signal(session_id)
        try:
            await waiter
        finally:
            waiter.cancel()
