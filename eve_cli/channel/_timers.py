"""Durable timers for a server: a session parked on one (a sleeping turn) is driven when it is
due, by this server's supervisor.

The timers live in the world (each session's head says when its run is due); this keeps only
a copy to sleep on: every timer, read at start; a session's own after each drive of this
server (what it just put to sleep); and the timers of the sessions another process put to
sleep, when the world says so (`Runtime.wait_timers` / `timers_since`: on the local world a
change notification of one file, no polling, then those sessions' heads alone). Every timer
is read again every `BACKSTOP` seconds in case such a notice was lost, or every `SCAN`
seconds on a world that cannot give them (PostgreSQL: there every worker's sweep finds due
timers too, so whichever worker looks first drives the session; the lease makes that one).
One task per server, however many sessions sleep: a sleeping session holds nothing (D5).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Hashable

from eve_cli._facade import ServingFacade

SCAN = 30.0  # seconds between reads of every timer on a world that gives no notices
BACKSTOP = 600.0  # the same where it gives them: only a lost notice (a full disk) needs it
GAP = 0.05  # at least this long between two reads a notice asks for: a burst is read at once


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
        self._driven: set[str] = set()  # sessions whose timers to read again
        self._changed = asyncio.Event()
        self._read_all = True

    def driven(self, session_id: str) -> None:
        """A drive of ``session_id`` ended here: it may have parked on a timer, or left one."""
        self._driven.add(session_id)
        self._changed.set()

    async def run(self) -> None:
        # The version is read before the first read of every timer: a session put to sleep
        # between the two is in what `timers_since(version)` gives.
        version = await self._version()
        if version is not None:
            self._scan = max(self._scan, BACKSTOP)
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
        """Read the timers of the sessions another process puts to sleep, as it does."""
        if version is None:
            return  # this world gives no notices: the periodic read finds them
        while True:
            try:
                if await self._runtime.wait_timers(version, self._scan):
                    version, sessions = await self._runtime.call(
                        self._runtime.timers_since, version
                    )
                    if sessions is None:
                        self._read_all = True
                    else:
                        self._driven.update(sessions)
                    self._changed.set()
                    await asyncio.sleep(GAP)
            except Exception as exc:
                self._log(f"waiting for new timers: {type(exc).__name__}: {exc}")
                await asyncio.sleep(1.0)

    async def _follow(self) -> None:
        rescan = 0.0
        while True:
            self._changed.clear()
            try:
                if self._read_all or self._runtime.now() >= rescan:
                    self._read_all = False
                    self._due = await asyncio.to_thread(self._runtime.timers)
                    rescan = self._runtime.now() + self._scan
                while self._driven:
                    sid = self._driven.pop()
                    self._due.pop(sid, None)
                    self._due.update(await self._runtime.call(self._runtime.timers, sid))
            except Exception as exc:  # the store away for a moment: look again later
                self._log(f"reading session timers: {type(exc).__name__}: {exc}")
                rescan = self._runtime.now() + 1.0
            now = self._runtime.now()  # the world's clock: the one the timers were set by
            for sid, when in sorted(self._due.items(), key=lambda item: item[1]):
                if when <= now:
                    del self._due[sid]
                    self._kick(sid)
            wait = min([rescan, *self._due.values()]) - now
            # (`asyncio.timeout`, not `wait_for`: 3.11's swallows a cancel that comes as the
            # event is set, and a server stopping then would wait here for the next one)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.01)):
                    await self._changed.wait()
