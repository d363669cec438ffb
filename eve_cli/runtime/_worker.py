"""What drives sessions: drive one until it waits, find the ones with work left, their timers,
and the agent's schedules (SPEC §16).

A drive's result is made while its last head is written (`Engine.head_note`), under its lease:
the family is held, so the stored events are those the kept fold took and none need reading
back in a round trip of their own after the drive.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, cast, overload

from eve_cli._facade import SessionStatus
from eve_cli._schedules import Schedule, ScheduleMark, ScheduleRow, load_schedules
from eve_cli._session import SessionMeta, events_stream
from eve_cli.execution import SessionView
from eve_cli.runtime._client import Client
from eve_cli.runtime._core import Core, SessionNotFoundError, live_status
from eve_cli.runtime._reader import Reader, RowNote
from world import RunNotFoundError

__all__ = ["Worker"]


@dataclass
class _DriveEnd:
    """What a drive of a session returns (``result``: its view if ``view``, else its status),
    made by the last head write of the drive (:meth:`Worker._end_of_drive`)."""

    meta: SessionMeta
    view: bool
    result: SessionView | SessionStatus | None = None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class Worker:
    """Runs sessions of one runtime, and the schedules that start them."""

    def __init__(self, core: Core, reader: Reader, client: Client) -> None:
        self.core = core
        self.reader = reader
        self.client = client
        self._ends: dict[str, _DriveEnd] = {}  # sessions a drive here is driving now
        core.engine.head_note = self.head_note

    # -- driving --------------------------------------------------------------------------
    @overload
    async def drive(
        self, sid: str, *, wait: float | None = None, view: Literal[True] = True
    ) -> SessionView: ...

    @overload
    async def drive(
        self, sid: str, *, wait: float | None = None, view: Literal[False]
    ) -> SessionStatus: ...

    async def drive(
        self, sid: str, *, wait: float | None = None, view: bool = True
    ) -> SessionView | SessionStatus:
        core = self.core
        # A session seen before is not looked up again: the engine's run finds out whether
        # its family is still there (one round trip, not two), and the meta is the one the
        # view needs (a session's meta never changes).
        known = core.kept_meta(sid)
        meta = known if known is not None else await core.call(core.meta, sid)
        end = _DriveEnd(meta, view) if "." not in sid and sid not in self._ends else None
        if end is not None:
            self._ends[sid] = end
        try:
            await core.engine.run(sid, wait=wait)
        except RunNotFoundError:
            core.forget_meta(sid)  # removed since (`eve gc`)
            core.views.forget(sid)
            raise SessionNotFoundError(f"no session {sid!r}") from None
        except BaseException:
            core.views.forget(sid)  # it may have taken events that were not stored
            core.executor.forget(sid)  # nor the history its turns wrote (`wrote_history`)
            raise
        finally:
            if end is not None:
                del self._ends[sid]
        if end is not None and end.result is not None:
            return end.result
        if not view:
            return {"id": sid, "status": await core.call(self.reader.status, sid)}
        return await core.call(self.reader.view, sid, meta)

    def head_note(self, root: str) -> RowNote | None:
        """Kept in the session's head by the engine each time it writes it (end of a drive,
        creation): the listing row (`Reader.row_note`); and the drive's result is made."""
        note = self.reader.row_note(root)
        if (end := self._ends.get(root)) is not None:
            self._end_of_drive(root, end)
        return note

    def _end_of_drive(self, sid: str, end: _DriveEnd) -> None:
        """What the drive of ``sid`` returns, made while its head is written: the family is
        held, so the stored events are those the kept fold took (none to read back) and no
        one else appends more before the head is written. One that cannot be made here is
        made after the drive (as before: an error is raised there)."""
        end.result = None
        try:
            length = self.core.world.stream_length(events_stream(sid))
            if end.view:
                end.result = self.reader.view(sid, end.meta, length)
            elif (kept := self.core.views.fold_at(sid, length)) is not None:
                end.result = {"id": sid, "status": live_status(kept.view)}
        except Exception:
            end.result = None

    async def wait(self, sid: str, timeout: float) -> bool:
        await self.core.call(self.core.meta, sid)
        return await self.core.engine.wait(sid, timeout)

    def resumable(self) -> list[str]:
        found = []
        for run_id in self.core.engine.runnable():
            root = run_id.split(".", 1)[0]
            if root not in found:
                found.append(root)
        return found

    # -- timers ---------------------------------------------------------------------------
    def timers(self, sid: str | None = None) -> dict[str, float]:
        due: dict[str, float] = {}
        for run_id, when in self.core.engine.timers(sid):
            root = run_id.split(".", 1)[0]
            due[root] = min(when, due.get(root, when))
        return due

    def timers_version(self) -> Hashable:
        return self.core.engine.timers_version()

    def timers_since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        return self.core.engine.timers_since(version)

    async def wait_timers(self, version: Hashable, timeout: float) -> bool:
        return await self.core.engine.wait_timers(version, timeout)

    # -- schedules ------------------------------------------------------------------------
    def schedules(self) -> tuple[list[Schedule], list[str]]:
        return load_schedules(self.core.agent_folder)

    def _schedule_marks(self, agent: str | None = None) -> list[tuple[ScheduleMark, str]]:
        """``(meta["schedule"], session id)`` of every session a schedule of this agent
        (``agent``: its name, when read already) started (from the heads: one call)."""
        found = []
        agent = self.core.agent_name if agent is None else agent
        for info in self.core.engine.runs():
            mark = info.meta.get("schedule") if info.parent is None else None
            if isinstance(mark, dict) and mark.get("agent") == agent:
                found.append((cast(ScheduleMark, mark), info.run_id))  # as run_schedule wrote it
        return found

    def schedule_sessions(self, agent: str | None = None) -> dict[str, list[tuple[float, str]]]:
        found: dict[str, list[tuple[float, str]]] = {}
        for mark, sid in self._schedule_marks(agent):
            found.setdefault(str(mark.get("name")), []).append((float(mark.get("tick") or 0), sid))
        return {name: sorted(runs) for name, runs in found.items()}

    def schedule_ticks(self) -> dict[str, float]:
        latest: dict[str, float] = {}
        for mark, _ in self._schedule_marks():
            if not mark.get("manual"):
                name, tick = str(mark.get("name")), float(mark.get("tick") or 0.0)
                latest[name] = max(tick, latest.get(name, tick))
        return latest

    async def run_schedule(self, schedule: Schedule, tick: float) -> tuple[str, bool]:
        agent = self.core.agent.name
        operation = f"schedule:{agent}:{schedule.name}:{tick:.3f}"
        mark = {"agent": agent, "name": schedule.name, "tick": tick}
        return await self.client.create_session(
            schedule.mode, None, operation, schedule.message, {"schedule": mark}
        )

    async def run_schedule_now(self, name: str) -> str:
        found = {s.name: s for s in self.schedules()[0]}
        if name not in found:
            known = ", ".join(sorted(found)) or "none"
            directory = self.core.agent.directory
            raise LookupError(f"no schedule {name!r} in {directory} (known: {known})")
        schedule, now = found[name], self.core.world.now()
        mark = {"agent": self.core.agent.name, "name": name, "tick": now, "manual": True}
        sid, _ = await self.client.create_session(
            schedule.mode, None, None, schedule.message, {"schedule": mark}
        )
        return sid

    def schedule_rows(self) -> tuple[list[ScheduleRow], list[str]]:
        # The agent's name first: a missing or broken agent.py is said, schedules or none.
        agent = self.core.agent_name
        schedules, problems = self.schedules()
        made = self.schedule_sessions(agent) if schedules else {}
        now, rows = self.core.world.now(), list[ScheduleRow]()
        for schedule in schedules:
            runs = made.get(schedule.name, [])
            upcoming = schedule.next_after(now)
            rows.append(
                {
                    "name": schedule.name,
                    "when": schedule.when,
                    "timezone": schedule.timezone,
                    "mode": schedule.mode,
                    "missed": schedule.missed,
                    "next": _iso(upcoming) if upcoming is not None else None,
                    "last": _iso(runs[-1][0]) if runs else None,
                    "lastSession": runs[-1][1] if runs else None,
                    "sessions": len(runs),
                    # The latest ones it made (all of them: `sessions`).
                    "made": [{"tick": _iso(t), "sessionId": sid} for t, sid in runs[-10:]],
                    "file": str(schedule.path),
                }
            )
        return rows, problems
