"""The schedules of a server's agent (`eve start`, `eve dev`): each tick starts one session.

Exactly once per tick, whatever restarts or how many workers share the world: a tick's
session has an id derived from the agent, the schedule and the tick (`Runtime.run_schedule`),
and its first message is part of its creation, so every worker may start it and all but the
first find it made. After a start (or an edit of the schedule), the latest tick at or before
now is run if no session has it yet and it is at most `GRACE` late (a restart at the tick);
older ones were missed: skipped, or with ``missed: once`` the latest runs once — if the
schedule ran before (a new schedule missed nothing). A broken file is logged once, by file
and line; the others go on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable

from eve_cli._facade import ServingFacade
from eve_cli._schedules import Schedule
from eve_cli.channel._metrics import ServerMetrics

GRACE = 60.0  # seconds a tick may be late and still run as itself (not missed)
RELOAD = 5.0  # seconds between reads of the schedule files (edits apply within this)
MAX_REPORTED = 1000  # skipped ticks counted in one report (a long stall of a short period)


def grace(schedule: Schedule, tick: float) -> float:
    """How late ``tick`` may run: `GRACE`, or less when the next tick comes sooner."""
    after = schedule.next_after(tick)
    return GRACE if after is None else min(GRACE, after - tick)


class Scheduler:
    """Starts the sessions of one server's schedules (`run` until cancelled)."""

    def __init__(
        self,
        runtime: ServingFacade,
        kick: Callable[[str], None],
        log: Callable[[str], None],
        clock: Callable[[], float] | None = None,
    ) -> None:
        # The world's clock by default: the one every worker sharing the world agrees on.
        self._runtime, self._kick, self._log = runtime, kick, log
        self._clock = clock or runtime.now
        self._known: dict[str, Schedule] = {}
        self._next: dict[str, float | None] = {}
        self._reported: set[str] = set()
        self.metrics: ServerMetrics | None = None  # counts ticks run and skipped when set

    async def run(self) -> None:
        while True:
            try:
                await self.look()
            except Exception as exc:  # the store away for a moment: look again later
                self._log(f"schedules: {type(exc).__name__}: {exc}")
            now = self._clock()
            ahead = [t for t in self._next.values() if t is not None]
            await asyncio.sleep(max(min([now + RELOAD, *ahead]) - now, 0.01))

    async def look(self) -> None:
        """Read the schedule files and start the sessions that are due now (one pass)."""
        schedules, problems = await asyncio.to_thread(self._runtime.schedules)
        for problem in problems:
            if problem not in self._reported:
                self._log(f"schedule not loaded: {problem}")
        self._reported = set(problems)
        await self._reload(schedules)
        now = self._clock()
        for name, schedule in self._known.items():
            due = self._next.get(name)
            if due is None or due > now:
                continue
            tick = schedule.last_at_or_before(now)
            run = tick is not None and (
                now - tick <= grace(schedule, tick) or schedule.missed == "once"
            )
            self._report_skipped(schedule, due, tick if run else None, now)
            if run and tick is not None:
                await self._start(schedule, tick)
            self._next[name] = schedule.next_after(now)

    async def _reload(self, schedules: list[Schedule]) -> None:
        """Forget the schedules gone; plan those new or changed from their last tick."""
        current = {s.name for s in schedules}
        for name in set(self._known) - current:
            del self._known[name]
            self._next.pop(name, None)
        changed = [s for s in schedules if self._known.get(s.name) != s]
        if changed:
            last = await asyncio.to_thread(self._runtime.schedule_ticks)
            for schedule in changed:
                self._known[schedule.name] = schedule
                await self._plan(schedule, last.get(schedule.name))

    def _report_skipped(
        self, schedule: Schedule, due: float, run: float | None, now: float
    ) -> None:
        """Say which ticks from `due` on this server skips (all up to `now` but `run`): it
        looked too late for them (a stall, a loaded machine), and another worker may have
        started them. Silence would make a tick that never ran look like a lost one."""
        skipped: list[float] = []
        tick: float | None = due
        while tick is not None and tick <= now:
            if len(skipped) == MAX_REPORTED:  # a long stall of a short period: not all counted
                self._log(
                    f"schedule {schedule.name}: skipped more than {MAX_REPORTED} ticks from "
                    f"{_iso(skipped[0])} (missed: {schedule.missed})"
                )
                return
            if tick != run:
                skipped.append(tick)
            tick = schedule.next_after(tick)
        if not skipped:
            return
        if self.metrics is not None:
            self.metrics.schedule_ticks.labels("skipped").inc(len(skipped))
        first, last = (_iso(t) for t in (skipped[0], skipped[-1]))
        which = first if len(skipped) == 1 else f"{first} to {last}"
        self._log(
            f"schedule {schedule.name}: skipped {len(skipped)} tick(s), {which}: looked "
            f"{now - skipped[-1]:.1f}s after the last (missed: {schedule.missed})"
        )

    async def _plan(self, schedule: Schedule, last: float | None) -> None:
        """A schedule seen for the first time (or changed): the tick it may owe, then the next."""
        now = self._clock()
        tick = schedule.last_at_or_before(now)
        if tick is not None and (last is None or last < tick):
            if now - tick <= grace(schedule, tick):
                await self._start(schedule, tick)
            elif schedule.missed == "once" and last is not None:
                await self._start(schedule, tick)  # catch up once for what was missed
        self._next[schedule.name] = schedule.next_after(now)

    async def _start(self, schedule: Schedule, tick: float) -> None:
        sid, created = await self._runtime.run_schedule(schedule, tick)
        if created and self.metrics is not None:
            self.metrics.schedule_ticks.labels("run").inc()
        if created:
            self._log(f"schedule {schedule.name}: tick {_iso(tick)} started session {sid}")
        self._kick(sid)


def _iso(tick: float) -> str:
    return dt.datetime.fromtimestamp(tick, dt.UTC).isoformat(timespec="seconds")
