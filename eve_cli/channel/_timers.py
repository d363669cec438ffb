"""Durable timers for a server: a session parked on one (a sleeping turn) is driven when it is
due, by this server's supervisor.

The timers live in the world (each session's head says when its run is due); this keeps only
a copy to sleep on: every timer, read at start and every `scan` seconds (what other processes
put to sleep), and a session's own after each drive of this server (what it just put to
sleep). One task per server, however many sessions sleep: a sleeping session holds nothing
(D5). On a world several workers share, each worker's sweep also finds due timers, so
whichever worker looks first drives the session; the lease makes that one worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from eve_cli._facade import ServingFacade

SCAN = 30.0  # seconds between reads of every session's timers


class Timers:
    """Kicks sessions of one server when their timers are due (`run` until cancelled)."""

    def __init__(
        self,
        runtime: ServingFacade,
        kick: Callable[[str], None],
        log: Callable[[str], None],
        scan: float = SCAN,
    ) -> None:
        self._runtime, self._kick, self._log, self._scan = runtime, kick, log, scan
        self._due: dict[str, float] = {}
        self._driven: set[str] = set()
        self._changed = asyncio.Event()

    def driven(self, session_id: str) -> None:
        """A drive of ``session_id`` ended here: it may have parked on a timer, or left one."""
        self._driven.add(session_id)
        self._changed.set()

    async def run(self) -> None:
        rescan = 0.0
        while True:
            self._changed.clear()
            try:
                if time.time() >= rescan:
                    self._due = await asyncio.to_thread(self._runtime.timers)
                    rescan = time.time() + self._scan
                while self._driven:
                    sid = self._driven.pop()
                    self._due.pop(sid, None)
                    self._due.update(await self._runtime.call(self._runtime.timers, sid))
            except Exception as exc:  # the store away for a moment: look again later
                self._log(f"reading session timers: {type(exc).__name__}: {exc}")
                rescan = time.time() + 1.0
            now = time.time()
            for sid, when in sorted(self._due.items(), key=lambda item: item[1]):
                if when <= now:
                    del self._due[sid]
                    self._kick(sid)
            wait = min([rescan, *self._due.values()]) - time.time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(wait, 0.01))
