"""Durable timers for a server: a session parked on one (a sleeping turn) is driven when it is
due, by this server's supervisor.

The timers live in the world (each session's head says when its run is due); this keeps only
a copy to sleep on: every timer, read at start, again soon after any process puts a session
to sleep (`Runtime.wait_timers`: on the local world a change notification of one file, no
polling), and every `scan` seconds in case such a notice was lost; and a session's own after
each drive of this server (what it just put to sleep). One task per server, however many
sessions sleep: a sleeping session holds nothing (D5). On a world several workers share, each
worker's sweep also finds due timers, so whichever worker looks first drives the session; the
lease makes that one worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable

from eve_cli._facade import ServingFacade

SCAN = 30.0  # seconds between reads of every session's timers when nothing said to read them
# At least this long between two reads of every timer that a notice asked for: sleeps started
# elsewhere in a burst cost one read of the heads per gap, not one each.
GAP = 0.25


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
        self._rescan_now = False

    def driven(self, session_id: str) -> None:
        """A drive of ``session_id`` ended here: it may have parked on a timer, or left one."""
        self._driven.add(session_id)
        self._changed.set()

    async def run(self) -> None:
        # The version is read before the first read of every timer: a session put to sleep
        # between the two changes it, so the watch asks for another read.
        version = await self._version()
        watch = asyncio.ensure_future(self._watch(version))
        try:
            await self._follow()
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    async def _version(self) -> Hashable:
        try:
            return await self._runtime.call(self._runtime.timers_version)
        except Exception as exc:  # the store away for a moment: the periodic read covers it
            self._log(f"reading the timers' version: {type(exc).__name__}: {exc}")
            return None

    async def _watch(self, version: Hashable) -> None:
        """Ask for a read of every timer each time another process puts a session to sleep."""
        while True:
            try:
                changed = await self._runtime.wait_timers(version, self._scan)
            except Exception as exc:
                self._log(f"waiting for new timers: {type(exc).__name__}: {exc}")
                changed = False
                await asyncio.sleep(1.0)
            if changed:
                version = await self._version()  # before the read it asks for
                self._rescan_now = True
                self._changed.set()
                await asyncio.sleep(GAP)

    async def _follow(self) -> None:
        rescan = 0.0
        while True:
            self._changed.clear()
            try:
                if self._rescan_now or time.time() >= rescan:
                    self._rescan_now = False
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
