"""The read side of the runtime: a session's view, the listing, events, history, lineage.

Nothing here writes. Views are kept as sessions grow (`ViewFold`, fed only the events appended
since); a listing's rows are read from what a drive left in each session's head when nothing
was appended since (:meth:`Reader.row_note` makes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, TypedDict, cast

from eve_cli._events import Event
from eve_cli._session import SessionMeta, Snapshot, events_stream, history_stream, session_base
from eve_cli.execution import (
    PAGE,
    TAIL,
    Lineage,
    SessionRow,
    SessionView,
    ViewFold,
    first_message,
    fold,
    fresh_start,
    lineage,
    summary,
)
from eve_cli.runtime._core import Core, live_status

if TYPE_CHECKING:
    from eve_cli.models import Message

__all__ = ["Reader"]

_FIRST_EVENTS = 16  # a session's first message is among its first events
_FIRST_LOOK = 4  # usually among these: session.started, turn.started, message.received


def _same(stored: Any, version: Any) -> bool:
    """A change token kept in a head (msgpack may give a list for a tuple) equals `version`."""
    if isinstance(stored, list) and isinstance(version, tuple):
        stored = tuple(stored)
    return version is not None and bool(stored == version)


class RowNote(TypedDict):
    """What a session's head keeps for the listing (`Reader.row_note`): its row, valid while
    its events stream has the version ``events``, and what the session stores (``bytes``)."""

    row: SessionRow
    events: Any  # `World.stream_versions`'s token, a list where it was a tuple
    bytes: int | None


class Reader:
    """Reads sessions; writes nothing."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.world = core.world

    # -- one session ----------------------------------------------------------------------
    def session(
        self, sid: str, turns: int | None = PAGE, from_turn: int | None = None
    ) -> SessionView:
        """The view of ``sid`` with its latest ``turns`` turns (None: all), or ``turns``
        from number ``from_turn`` on (None: all from there): see `ViewCache.view`."""
        return self.view(sid, self.core.meta(sid), None, turns, from_turn)

    def view(
        self,
        sid: str,
        meta: SessionMeta,
        length: int | None = None,
        turns: int | None = PAGE,
        from_turn: int | None = None,
    ) -> SessionView:
        """The view of ``sid``, whose meta is ``meta`` (``length``: its events' number, when
        it is known; ``turns``, ``from_turn``: the page, as :meth:`session`)."""
        # Fed only the events appended since the last read (or its latest checkpoint), unless
        # the stored ones changed.
        reader = self.core.reader(sid, meta)
        view = self.core.views.view(reader, length, from_turn, turns)
        if view["events"] == 0:  # a session has session.started: one removed just now raises
            self.core.meta(sid)
        view["agent"] = view["agent"] or meta.get("agent")
        view["mode"] = view["mode"] or meta.get("mode")
        view["model"] = meta.get("model") or self.core.agent_model
        view["agentDir"] = meta.get("agentDir")
        return view

    def status(self, sid: str) -> str:
        """The session's status folded from its events since the last ``turn.started`` (or
        ``session.started``): a turn starts with nothing pending, so nothing older matters,
        and a delivery to an old session costs what it costs to a new one. A sleeping turn
        (the sleep tool) is ``running`` here: a message wakes it and is folded in."""
        return self.status_at(sid)[0]

    def status_at(self, sid: str, meta: SessionMeta | None = None) -> tuple[str, int, str | None]:
        """The session's status (see :meth:`status`), the number of events it is of and its
        agent when its events name it since the last turn began (a moved session's; None:
        its meta's) (``meta``: the session's, when just read)."""
        name = events_stream(sid)
        end = length = self.world.stream_length(name)
        kept = self.core.views.fold_at(sid, end)  # a fold of every stored event, kept: no read
        if kept is not None:
            return live_status(kept.view), length, kept.view["agent"]
        reader = self.core.reader(sid, meta)
        tail: list[Event] = []
        chunk = 16
        while end > 0:
            start = max(0, end - chunk)
            tail[:0] = reader.read(start, self.world.stream_read(name, start, end), texts=False)
            for i in range(len(tail) - 1, -1, -1):
                if fresh_start(tail[i]):
                    view = fold(sid, tail[i:])
                    return live_status(view), length, view["agent"]
            end, chunk = start, chunk * 4
        view = fold(sid, tail)
        return live_status(view), length, view["agent"]

    def stored_model(self, sid: str) -> str | None:
        model = self.core.meta(sid).get("model")
        return str(model) if model else None

    def lineage(self, sid: str) -> Lineage:
        return lineage(self.world, sid, self.core.meta(sid), self.core.meta_or_none)

    def history(self, sid: str) -> list[Message]:
        """The messages the model would see at the session's next turn (summary first), from
        the snapshot the last finished turn left (reads the journal: for inspection)."""
        meta = self.core.meta(sid)
        data = None
        for record in self.core.engine.history(sid):
            if record.get("t") in ("start", "gen"):
                data = record.get("input")
        if data is None:
            return []
        snap = Snapshot.from_data(data, sid, session_base(meta))
        from eve_cli.execution import read_window, window_messages  # (the harness's)

        messages, _, summary_text = read_window(self.world, snap)
        return window_messages(messages, summary_text)

    # -- events ---------------------------------------------------------------------------
    def events(
        self, sid: str, start: int = 0, *, texts: bool = True, end: int | None = None
    ) -> list[Event]:
        """Stored events from ``start`` (negative counts back from the tail) to ``end`` (not
        included; default: all), with indexes (``texts=False``: message texts left empty,
        which spares reading them)."""
        name = events_stream(sid)
        length = self.world.stream_length(name)
        first = max(0, length + start) if start < 0 else start
        items = self.world.stream_read(name, first, length if end is None else min(end, length))
        return self.core.reader(sid).read(first, items, texts=texts)

    async def tail(self, sid: str, start: int = 0) -> AsyncIterator[Event]:
        """Stored events from ``start``, then live ones as they are appended (any process)."""
        await self.core.call(self.core.meta, sid)
        name = events_stream(sid)
        if start < 0:
            start = max(0, await self.core.call(self.world.stream_length, name) + start)
        reader = self.core.reader(sid)
        async for index, item in self.world.stream_tail(name, start):
            # The texts of the events that refer to history items: read where reads wait.
            while not (events := await self.core.call(reader.read, index, [item])):
                await asyncio.sleep(0.02)  # its text is being stored (see EventReader.read)
            yield events[0]

    # -- the listing ----------------------------------------------------------------------
    def sessions(self) -> list[dict[str, Any]]:
        """One row per session, most recently active first (reads only each stream's tail);
        each a `SessionRow`, open to what a caller adds (a listing's live status, a title)."""
        with _collector_paused():
            return self._sessions()

    def _sessions(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        forks: dict[str, list[str]] = {}
        # One call for every session (no inbox marks: a row needs none), one for their streams.
        heads = self.world.heads(inbox=False)
        versions = self.world.stream_versions([events_stream(h.root) for h in heads])
        for family, version in zip(heads, versions, strict=True):
            sid, head = family.root, family.head
            note = head.get("note") if head else None
            row: SessionRow | None
            if isinstance(note, dict) and _same(note.get("events"), version):
                row = cast(SessionRow, dict(note["row"]))  # nothing appended since the head
                row["bytes"] = note.get("bytes")
            else:
                row = self.row(sid)
            if row is not None:
                rows.append(cast("dict[str, Any]", row))
                origin = row.get("forkedFrom")
                if isinstance(origin, dict):  # lineage, both ways, from the rows alone
                    forks.setdefault(str(origin.get("session")), []).append(sid)
        for listed in rows:
            if listed["id"] in forks:
                listed["forks"] = sorted(forks[listed["id"]])
        rows.sort(key=lambda r: r["updatedAt"] or "", reverse=True)
        return rows

    def row(self, sid: str) -> SessionRow | None:
        """The ``sessions()`` row of ``sid`` from its stream's tail; None if not a session."""
        tail = self.events(sid, -TAIL, texts=False)  # a row shows no message text
        if not tail or tail[0].get("sessionId") != sid:
            return None  # not an eve session
        if tail[0]["index"] > 0 and not any("turns" in event for event in tail):
            tail = self.events(sid)  # written before events carried counts: read it whole
        row = summary(sid, tail)
        if row["agent"] is None:  # nothing in the tail names it: since its last turn began
            row["agent"] = self.status_at(sid)[2] or self._agent_name(sid)
        row["first"] = self._first_message(sid)
        self._add_origin(row, sid)
        row["bytes"] = self._bytes(sid)
        return row

    def row_note(self, root: str) -> RowNote | None:
        """What a head keeps for the listing (written with the head, whose family is held):
        the row, valid while the event stream keeps the version it has now."""
        count = self.event_count(root)  # before reading: an append in between shows as stale
        # The kept view's fold, when it has every stored event: the tail needs no reading.
        kept = self.core.views.fold_at(root, self.world.stream_length(events_stream(root)))
        row = kept.row() if kept is not None else None
        if row is not None and kept is not None:
            row["first"] = (
                first_message(kept.view)  # a kept fold took every event
                if not kept.before
                else self._first_message(root, self.core.present_meta(root))
            )
            row["agent"] = row["agent"] or self._agent_name(root)
            row["bytes"] = self._bytes(root)
            self._add_origin(row, root)
        else:
            row = self.row(root)
        if row is None:
            return None
        bytes_ = row.pop("bytes")
        # A tuple is stored as a msgpack extension, decoded by a Python hook on each listing
        # (10,000 heads: 0.1 s); a list decodes natively, and `_same` compares it as a tuple.
        token = list(count) if isinstance(count, tuple) else count
        return {"row": row, "events": token, "bytes": bytes_}

    def _first_message(self, sid: str, meta: SessionMeta | None = None) -> str | None:
        """The session's first message, from its first events (session.started,
        turn.started, …), reading the text of that message alone (a row shows no other)."""
        reader, name = self.core.reader(sid, meta), events_stream(sid)
        for count in (_FIRST_LOOK, _FIRST_EVENTS):  # (a first turn's input never changes)
            items = self.world.stream_read(name, 0, count)
            folded = ViewFold(sid).feed(reader.read(0, items, texts=False, refs=True))
            turns = folded.view["turns"]
            if (turns and turns[0].get("input") is not None) or len(items) < count:
                break
        if turns and (ref := folded.inputs.get(turns[0].get("number", 0))) is not None:
            turns[0]["input"] = reader.texts({ref}).get(ref, "")
        return first_message(folded.view)

    def event_count(self, sid: str) -> Any:
        """What identifies the stored events of ``sid`` (`World.stream_versions`: any append
        or rewrite changes it)."""
        return self.world.stream_versions([events_stream(sid)])[0]

    def _add_origin(self, row: SessionRow, sid: str) -> None:
        """A fork's row names where it came from (its meta's ``forkedFrom``), and a session
        created by a principal its owner (the meta's ``owner``)."""
        meta = self.core.present_meta(sid) or {}
        origin = meta.get("forkedFrom")
        if isinstance(origin, dict):
            row["forkedFrom"] = origin.copy()
        owner = meta.get("owner")
        if isinstance(owner, dict):
            row["owner"] = owner

    def owner(self, sid: str) -> dict[str, str] | None:
        """Who created session ``sid`` (its meta's ``owner``; None: made without principals);
        `SessionNotFoundError` when there is no such session."""
        owner = self.core.meta(sid).get("owner")
        return {str(k): str(v) for k, v in owner.items()} if isinstance(owner, dict) else None

    def _agent_name(self, sid: str) -> str | None:
        name = (self.core.present_meta(sid) or {}).get("agent")  # no head read: being written
        return str(name) if name else None

    def _bytes(self, sid: str) -> int:
        """Bytes a session stores (journal, inbox, head, its event and history streams)."""
        streams = (events_stream(sid), history_stream(sid))
        return self.world.family_usage(sid, streams=streams).bytes


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a listing builds its rows: 10,000 sessions'
    heads and rows (dicts, no cycles) made it run full collections over them again and again
    (a listing of 10,000: ~0.75 -> ~0.5 s)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
