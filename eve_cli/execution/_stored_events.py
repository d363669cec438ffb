"""A session's events as stored (the compact form of :mod:`._event_form`, a time relative to
the session's creation) and as readers see them (SPEC §8), with the texts they refer to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, cast

from eve_cli._events import Event, EventData
from eve_cli._session import history_stream
from eve_cli.execution._event_form import pack, unpack
from eve_cli.execution._lost import LOST_TEXT, lost_event
from eve_cli.execution._replies import resolve
from eve_cli.execution._streams import KEY
from world import LostItem, World

if TYPE_CHECKING:
    from eve_cli._session import Snapshot

REF: Final = "_h"  # an event's reference to the history item holding its text


def stored_event(
    type: str, at: float, data: EventData, since: float | None = None
) -> dict[str, Any]:
    """An event as stored: no session id (the stream names it), in the compact form of
    :mod:`eve_cli.execution._event_form`; ``at`` as epoch seconds (a float), or, given the
    session's creation time (``since``: its run's meta ``created``), whole milliseconds
    since then (an int: 3-5 bytes, not 9)."""
    return pack({"type": type, "at": stored_time(at, since), **data})


def started_event(snap: Snapshot, agent: str) -> EventData:
    """The data of ``session.started`` (written by the driver and by the runtime at creation,
    under the same key)."""
    return {"agent": agent, "mode": snap.mode, "model": snap.model, "parent": snap.parent}


def stored_time(at: float, since: float | None) -> float | int:
    """An event's ``at`` as stored (see :func:`stored_event`)."""
    return round(at, 3) if since is None else round(at * 1000) - round(since * 1000)


def read_event(
    session_id: str,
    index: int,
    item: dict[str, Any],
    texts: dict[int, str] | None = None,
    meta: Callable[[], Mapping[str, Any]] | None = None,
    refs: bool = False,
) -> Event:
    """A stored event as readers see it (SPEC §8): with index, session id and ISO time,
    ``text`` where the stored event refers to a history item (``_h``; ``texts`` by index),
    and a ``session.waiting`` stored without its ``continuationToken`` (the session's own)
    with it again, after ``at``, where it always was. ``meta()``: the session run's meta
    (its ``token``, and ``created``, the base of an ``at`` stored as an int). ``refs``: the
    event keeps its reference (``_h``) beside the text (the session fold's checkpoints store
    a message's text as that reference)."""
    event: dict[str, Any] = {}
    stored = unpack(item)
    waiting = stored.get("type") == "session.waiting" and (
        "continuationToken" not in stored or _forked(meta)
    )  # a fork's copy of an older event names the original's token: its own is in the meta
    for k, v in stored.items():
        if k == REF:
            event["text"] = (texts or {}).get(v, "") if isinstance(v, int) else ""
            if refs:
                event[REF] = v
        elif k != KEY and not (waiting and k == "continuationToken"):
            event[k] = v
        if k == "at" and waiting:
            event["continuationToken"] = (meta() if meta is not None else {}).get("token")
    if "at" in event:
        event["at"] = _iso_at(event["at"], meta)
    event["index"] = index
    # The stream's session, whatever an older form stored (a fork's copy of it names the
    # session it was copied from).
    event["sessionId"] = session_id
    return cast(Event, event)  # open: an event written by a later eve keeps its fields


def _iso_at(at: Any, meta: Callable[[], Mapping[str, Any]] | None) -> Any:
    """A stored ``at`` as an ISO time: milliseconds since the run's creation (an int) or
    seconds since the epoch (a float); anything else as it is."""
    if isinstance(at, int) and not isinstance(at, bool):
        since = (meta() if meta is not None else {}).get("created") or 0.0
        return iso_from_ms(round(float(since) * 1000) + at)
    if isinstance(at, float):
        return iso_ms(at)
    return at


def _forked(meta: Callable[[], Mapping[str, Any]] | None) -> bool:
    return meta is not None and "forkedFrom" in meta()


_SECONDS: dict[int, str] = {}  # epoch second -> its ISO form up to the seconds (UTC)


def iso_ms(at: float) -> str:
    """``datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")``, without
    building a datetime per event (a view reads every event of a turn)."""
    if not 0 <= at < 253402300800:  # outside years 1970-9999: the slow way says what is wrong
        return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    second = int(at)
    micros = round((at - second) * 1e6)  # as fromtimestamp rounds: half to even
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    return f"{_second_iso(second)}.{micros // 1000:03d}+00:00"


def iso_from_ms(ms: int) -> str:
    """The ISO time (UTC, milliseconds) of ``ms`` milliseconds since the epoch."""
    if not 0 <= ms < 253402300800000:
        moment = datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
        return moment.isoformat(timespec="milliseconds")
    return f"{_second_iso(ms // 1000)}.{ms % 1000:03d}+00:00"


def _second_iso(second: int) -> str:
    prefix = _SECONDS.get(second)
    if prefix is None:
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        prefix = _SECONDS[second] = datetime.fromtimestamp(second, UTC).isoformat()[:19]
    return prefix


class EventReader:
    """Reads one session's stored events as SPEC §8 events (see :func:`read_event`)."""

    def __init__(
        self, world: World, session_id: str, meta: Callable[[], Mapping[str, Any]] | None = None
    ) -> None:
        self.world = world
        self.session_id = session_id
        self.history = history_stream(session_id)
        self._meta = meta  # the session run's meta, asked for once when needed
        self._known: list[Mapping[str, Any]] = []

    def meta(self) -> Mapping[str, Any]:
        if not self._known:
            self._known.append(self._meta() if self._meta is not None else {})
        return self._known[0]

    def read(
        self, first: int, items: list[Any], *, texts: bool = True, refs: bool = False
    ) -> list[Event]:
        """The events stored at ``first``, ``first + 1``, ... (as read from the stream);
        ``texts=False``: an event that refers to a history item gets ``text`` "" (no read);
        ``refs``: it keeps the reference too (``_h``, see :func:`read_event`).

        The events end before the first one whose history item is not stored: the item is
        appended before the event, so it is being written, or a power cut kept the event and
        not the item (both written after the last journal record); a resume stores the item
        again, at the same index, with the same text. Never shown as ""."""
        wanted = {i[REF] for i in items if isinstance(i, dict) and REF in i} if texts else set()
        # A reply's text may be in its delta events, which come just before the reference.
        found = self.texts(wanted, dict(enumerate(items, first)) if wanted else None)
        if len(found) < len(wanted):
            for i, item in enumerate(items):
                if isinstance(item, dict) and REF in item and item[REF] not in found:
                    items = items[:i]
                    break
        return [
            lost_event(self.session_id, first + i)
            if isinstance(item, LostItem)
            else read_event(self.session_id, first + i, item, found, self.meta, refs)
            for i, item in enumerate(items)
        ]

    def texts(self, refs: set[int], events: dict[int, Any] | None = None) -> dict[int, str]:
        """The text (``content``) of the history items ``refs``: one read when they are close
        together (a session's events refer to about every history item), else one each.
        ``events``: stored events at hand, by index (a reply's text may be in them)."""
        if not refs:
            return {}
        low, high = min(refs), max(refs)
        spans = [(low, high + 1)] if high - low < 4 * len(refs) + 64 else [(r, r + 1) for r in refs]
        found: dict[int, str] = {}
        for start, end in spans:
            items = self.world.stream_read(self.history, start, end)
            items = [i if start + n in refs else None for n, i in enumerate(items)]
            sid = self.session_id
            items = resolve(self.world, sid, start, items, events=events, lost=LOST_TEXT)
            for offset, item in enumerate(items):
                if isinstance(item, dict):
                    found[start + offset] = str(item.get("content") or "")
                elif isinstance(item, LostItem):
                    found[start + offset] = LOST_TEXT
        return found
