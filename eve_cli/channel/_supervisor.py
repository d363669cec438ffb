"""Drives sessions in background tasks after deliveries, and resumes in-flight ones at start-up.

One task per session at most. A kick while a drive runs marks the session dirty, so a delivery
that raced the end of a drive is never left sitting in the inbox. On a world several workers
share, `sweep` looks for sessions with work now and then and drives those no live worker
drives (a dead or frozen worker's: its lease has lapsed); one another worker drives is left to
it, quietly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from eve_cli._facade import ServingFacade
from eve_cli.channel._metrics import ServerMetrics
from world import OwnershipError


class Supervisor:
    """Owns the background drive tasks of one server."""

    def __init__(
        self,
        runtime: ServingFacade,
        log: Callable[[str], None],
        metrics: ServerMetrics | None = None,
    ) -> None:
        self._runtime = runtime
        self._log = log
        self._metrics = metrics or ServerMetrics(list, list)  # counted, if nobody reads them
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        # Drives started by `sweep` that nothing else asked for: another worker driving the
        # session is no news for them (a create or a delivery kicking it meanwhile makes it so).
        self._swept: set[str] = set()
        self._closing = False
        # Told the session id after each drive ends (the server's timers re-read its own).
        self.on_driven: Callable[[str], None] | None = None

    def kick(self, session_id: str, *, swept: bool = False) -> None:
        """Make sure ``session_id`` is driven after this call, once, in the background
        (``swept``: found by `sweep`, so another worker driving it is no news)."""
        if self._closing:
            return
        self._dirty.add(session_id)
        if not swept:
            self._swept.discard(session_id)
        if session_id not in self._tasks:
            if swept:
                self._swept.add(session_id)
            task = asyncio.get_running_loop().create_task(
                self._drive(session_id), name=f"eve-drive-{session_id}"
            )
            self._tasks[session_id] = task

    async def sweep(self, interval: float) -> None:
        """Every ``interval`` seconds, kick the sessions with work to do that this server does
        not drive (runs until cancelled; a failed look is logged and tried again)."""
        failed = False
        while not self._closing:
            await asyncio.sleep(interval)
            try:
                found = await asyncio.to_thread(self._runtime.resumable)
            except Exception as exc:  # the database away for a moment: look again later
                if not failed:
                    self._log(f"looking for sessions to take over: {type(exc).__name__}: {exc}")
                failed = True
                continue
            failed = False
            for session_id in found:
                if session_id not in self._tasks:
                    self.kick(session_id, swept=True)

    def resume_in_flight(self) -> list[str]:
        """Kick every session with work to do: interrupted turns, undelivered input."""
        ids = list(self._runtime.resumable())
        for session_id in ids:
            self.kick(session_id)
        return ids

    @property
    def active(self) -> list[str]:
        """Ids of the sessions being driven now."""
        return sorted(self._tasks)

    async def settled(self, session_id: str) -> None:
        """Wait until ``session_id`` is not being driven here (its drive and any kick made
        during it are done)."""
        while (task := self._tasks.get(session_id)) is not None:
            await asyncio.wait([task])

    async def idle(self) -> None:
        """Wait until no session is being driven (tests and shutdown)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    async def close(self, grace: float) -> None:
        """Stop driving: let running drives finish for ``grace`` seconds, then cancel them.

        A cancelled drive leaves its session resumable: every finished action is journaled and
        the next process carries the turn on.
        """
        self._closing = True
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            self._log(f"stopped {len(pending)} running session(s); they resume on next start")

    async def _drive(self, session_id: str) -> None:
        try:
            while session_id in self._dirty and not self._closing:
                self._dirty.discard(session_id)
                try:
                    await self._runtime.drive(session_id, view=False)  # the view is not used
                except asyncio.CancelledError:
                    raise
                except OwnershipError as exc:
                    self._metrics.lease_losses.inc()
                    if session_id not in self._swept:  # another worker drives it: the
                        # delivery waits in its inbox
                        self._log(f"session {session_id}: {exc}")
                    return
                except Exception as exc:  # one session's failure must not stop the server
                    self._log(f"session {session_id}: {type(exc).__name__}: {exc}")
                else:
                    if session_id in self._swept:
                        self._log(f"took over session {session_id} (no live worker drove it)")
                        self._metrics.takeovers.inc()
                        self._swept.discard(session_id)
        finally:
            self._tasks.pop(session_id, None)
            self._swept.discard(session_id)
            if self.on_driven is not None:
                self.on_driven(session_id)
