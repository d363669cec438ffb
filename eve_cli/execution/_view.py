"""Session views kept as their sessions grow: each fed only the events appended since
(the fold itself, and the view's types, are `eve_cli.execution._fold`'s)."""

from __future__ import annotations

import copy
import pickle
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypedDict, cast

from eve_cli._session import events_stream
from eve_cli.execution._fold import (
    FOLD_VERSION,
    ActionView,
    FoldState,
    MarkView,
    SessionRow,
    SessionView,
    StepView,
    TurnView,
    ViewFold,
    fill_texts,
    fold,
    fold_state,
    refs_of,
    restored,
    trim,
)
from eve_cli.execution._frozen import FrozenList, freeze
from eve_cli.execution._replies import SPANS, runs
from eve_cli.execution._stored_events import EventReader
from world import World, WorldError, decode, encode

__all__ = [
    "PAGE",
    "TAIL",
    "ActionView",
    "Checkpoint",
    "SessionRow",
    "SessionView",
    "StepView",
    "TurnView",
    "ViewCache",
    "ViewFold",
    "bounds",
    "checkpoint_stream",
    "fold",
    "summary",
]


PAGE = 20  # turns a view holds by default: the latest


class _Kept:
    """A session's fold as kept: the digest of the first ``count`` events (what was checked
    against the stream, at most what the fold took); its held turns before the last, frozen
    (by number); ``base``: the index of the checkpoint record that holds the turns before
    the held ones (-1: none needed); ``older``: checkpoint records decoded for pages of
    earlier turns, by index (their turns frozen); ``reach``: how many records the latest
    page that ends at the held turns needed (at most those of a default page: a record holds
    at least one turn more than the one before)."""

    __slots__ = ("base", "count", "digest", "due", "fold", "frozen", "older", "reach")

    def __init__(self, fold: ViewFold, count: int = 0, digest: Any = None, base: int = -1) -> None:
        self.fold, self.count, self.digest, self.base = fold, count, digest, base
        self.frozen: dict[int, Any] = {}
        self.older: dict[int, _Part] = {}
        self.reach = 0
        # Restored from a checkpoint: its state, and the turns whose texts are not read yet.
        self.due: tuple[FoldState, set[int]] | None = None


class _Part(NamedTuple):
    """One checkpoint record, decoded: its turns (from number ``since + 1`` to ``turns``,
    frozen, texts filled), its marks (from number ``marksFrom`` to ``marks``, frozen)."""

    since: int
    turns: int
    marks_from: int
    marks: int
    held: list[TurnView]
    held_marks: list[MarkView]


_RECORDS_KEPT = 8  # decoded checkpoint records a kept fold keeps at least (see `_keep_older`)


class Checkpoint(TypedDict):
    """A checkpoint of a session's fold, as stored: the fold's version, the events it took
    (``events``; the last of them as stored, their digest), the turns it had (``turns``; its
    state holds those after ``since``) and marks, and its state (`FoldState`, msgpack,
    zlib-compressed)."""

    fold: int
    events: int
    last: Any
    digest: Any
    turns: int
    since: int
    marks: int
    data: bytes


def checkpoint_stream(session_id: str) -> str:
    """The stream a session's fold is checkpointed to (one of its family's)."""
    return f"views.{session_id}"


EVERY = 512  # events folded at most between a session's checkpoints (at a turn's end)


def bounds(total: int, first: int | None, count: int | None) -> tuple[int, int]:
    """The numbers of the first and last turns of a page of a session of ``total`` turns:
    ``count`` turns from number ``first`` (None: all from there), or with no ``first`` the
    latest ``count`` (None: every turn)."""
    if first is None:
        return (1 if count is None else max(1, total - count + 1)), total
    first = max(1, first)
    return first, total if count is None else min(total, first + max(0, count) - 1)


class ViewCache:
    """Session views folded so far, each fed only the events appended since.

    A fold is reused only while the world's digest of the events it folded is unchanged, so
    damage to stored events is reported on the next read just as a fresh fold reports it. A
    world without digests folds afresh every time. The process that writes a session's
    events feeds them to its kept fold as it writes them (:meth:`fold_at`), so a view after
    a turn reads none of them back; the digest then takes their stored bytes in.

    A view is a page of the session's turns (the latest :data:`PAGE` by default, with
    ``turnCount`` and ``turnsFrom``): a kept fold holds only the turns since its latest
    checkpoint, and a page of earlier ones decodes only the checkpoints that hold them.
    Callers get a copy; turns before the last (which events no longer change) are read-only
    and shared by every copy handed out since (see :mod:`eve_cli.execution._frozen`).

    Checkpoints: at the end of a turn, once :data:`EVERY` events were written since the last
    one, the writer stores the fold's state (:func:`fold_state`: the turns since the last
    checkpoint and what the fold holds besides, its texts as history indexes) in the
    session's :func:`checkpoint_stream` (:meth:`checkpoint`), and its kept fold lets the
    turns before go. A process without a kept fold starts from the latest one of its fold's
    version whose last event is still the stored one, and folds only the events after it: a
    view costs the events since the checkpoint and the turns it shows, not the session's
    age. A checkpoint is believed as the session's snapshot is (the events it took are not
    read back); one missing or unreadable where a page needs it: the session is folded afresh.
    """

    def __init__(self, world: World, size: int = 32) -> None:
        self.world = world
        self.size = size
        self._folds: OrderedDict[str, _Kept] = OrderedDict()
        self._marks: dict[str, int] = {}  # events taken by a session's latest checkpoint

    def fold_at(self, session_id: str, count: int) -> ViewFold | None:
        """The kept fold of ``session_id`` if it has taken exactly ``count`` events, else
        None: the writer of event ``count`` feeds it then, and with ``count`` the stream's
        length its status and row are the stored events' (no read). It holds the turns
        since its latest checkpoint (``before``: how many it does not)."""
        kept = self._folds.get(session_id)
        return kept.fold if kept is not None and kept.fold.view["events"] == count else None

    def forget(self, session_id: str) -> None:
        """Drop the kept fold (what it was fed may not have been stored)."""
        self._folds.pop(session_id, None)
        self._marks.pop(session_id, None)

    def view(
        self,
        reader: EventReader,
        length: int | None = None,
        first: int | None = None,
        count: int | None = PAGE,
    ) -> SessionView:
        """The view of ``reader``'s session (``length``: its events' number, when known),
        its turns a page (see :func:`bounds`)."""
        kept = self._kept(reader, length)
        page = self._page(reader, kept, first, count)
        if page is None:  # a checkpoint the page needs is missing: fold afresh
            afresh = _Kept(ViewFold(reader.session_id).feed(self._read(reader, 0, length)))
            afresh.fold.times()
            page = self._page(reader, afresh, first, count)
            assert page is not None  # holds every turn
        return page

    def _kept(self, reader: EventReader, length: int | None) -> _Kept:
        """The kept fold of ``reader``'s session, fed every stored event."""
        session_id = reader.session_id
        stream = events_stream(session_id)
        kept = self._folds.pop(session_id, None)
        if kept is not None and self.world.stream_digest(stream, kept.count) != kept.digest:
            kept = None  # rewritten or damaged since: read it all again
        if kept is None:
            kept = self._restore(reader) or _Kept(ViewFold(session_id))
        folded = kept.fold
        folded.feed(self._read(reader, folded.view["events"], length))
        # What was checked just now is not read again: only the events fed since.
        checked = (kept.count, kept.digest) if kept.digest is not None else None
        digest = self.world.stream_digest(stream, folded.view["events"], checked)
        if digest is None and checked is not None:
            # Fed more than is stored (a write failed after the fold took it): fold afresh.
            kept = _Kept(ViewFold(session_id))
            folded = kept.fold
            folded.feed(self._read(reader, 0, length))
            digest = self.world.stream_digest(stream, folded.view["events"])
        folded.times()
        if digest is not None:
            kept.count, kept.digest = folded.view["events"], digest
            self._folds[session_id] = kept
            while len(self._folds) > self.size:
                self._folds.popitem(last=False)
        return kept

    def _page(
        self, reader: EventReader, kept: _Kept, first: int | None, count: int | None
    ) -> SessionView | None:
        """A copy of ``kept``'s view with the turns of the page (and their marks); None: a
        checkpoint holding earlier turns it needs cannot be read."""
        folded = kept.fold
        before, held = folded.before, folded.view["turns"]
        total = before + len(held)
        lo, hi = bounds(total, first, count)
        low = lo if lo > 1 else 0  # marks after turn 0 come before the first turn
        turns: list[Any] = []
        marks: list[Any] = []
        if before and lo <= min(hi, before + 1):  # earlier turns (or the first held's marks)
            older = self._older(reader, kept, lo, min(hi, before + 1))
            if older is None:
                return None
            found, marks = older
            if any(n not in found for n in range(lo, min(hi, before) + 1)):
                return None
            turns = [found[n] for n in range(lo, min(hi, before) + 1)]
        start, end = max(0, lo - before - 1), max(0, hi - before)
        self._fill(reader, kept, range(before + start + 1, before + end + 1))
        turns += _frozen_turns(kept, start, end)
        last = [held[-1]] if held and end == len(held) and start < end else []
        own = [m for m in folded.view.get("marks", []) if low <= m["turn"] <= hi]
        copied = _pickled({**folded.view, "turns": last, "marks": own})
        copied["turns"][:0] = turns
        copied["marks"][:0] = marks
        copied["turnCount"], copied["turnsFrom"] = total, lo
        return copied

    @staticmethod
    def _fill(reader: EventReader, kept: _Kept, numbers: range) -> None:
        """Read the texts of the held turns ``numbers`` that a checkpoint restored without."""
        if kept.due is None:
            return
        state, unread = kept.due
        wanted = unread.intersection(numbers)
        if not wanted:
            return
        turns = [t for t in kept.fold.view["turns"] if t.get("number", 0) in wanted]
        fill_texts(turns, state, _messages(reader, refs_of(state, wanted)))
        unread -= wanted
        if not unread:
            kept.due = None

    def _read(
        self, reader: EventReader, start: int, length: int | None
    ) -> Sequence[Mapping[str, Any]]:
        """The session's stored events from ``start`` (none from ``length`` on)."""
        if length is not None and start >= length:
            return []
        stream = events_stream(reader.session_id)
        return reader.read(start, self.world.stream_read(stream, start), refs=True)

    # -- pages of earlier turns ------------------------------------------------------------------
    def _older(
        self, reader: EventReader, kept: _Kept, lo: int, hi: int
    ) -> tuple[dict[int, Any], list[Any]] | None:
        """The turns ``lo`` to ``hi`` (by number) and their marks from the checkpoints that
        hold the turns before ``kept``'s held ones, from its ``base`` record back as far as
        needed; None: one of them is missing, of another version, or unreadable."""
        turns: dict[int, Any] = {}
        parts: list[list[Any]] = []
        want, marks = kept.fold.before + 1, kept.fold.marks_before  # what the base must hold
        index = kept.base
        walked = 0
        while True:
            part = self._part(reader, kept, index) if index >= 0 else None
            if part is None or part.turns != want or part.marks != marks:
                return None
            _take_part(part, lo, hi, turns, parts)
            walked += 1
            if part.since + 1 <= lo or part.since == 0:
                break
            want, marks, index = part.since + 1, part.marks_from, index - 1
        if hi > kept.fold.before:  # a page ending at the held turns (the default one's case)
            kept.reach = min(walked, PAGE + 1)  # (a longer page's records are not all kept)
            _keep_older(kept, -1)
        return turns, [m for found in reversed(parts) for m in found]

    def _part(self, reader: EventReader, kept: _Kept, index: int) -> _Part | None:
        """Checkpoint record ``index`` of ``kept``'s session, decoded (kept a while)."""
        part = kept.older.get(index)
        if part is not None:
            return part
        records = self.world.stream_read(checkpoint_stream(reader.session_id), index, index + 1)
        record = records[0] if records else None
        state = _decoded(record)
        if state is None or not isinstance(record, dict):
            return None
        turns = state["turns"]
        fill_texts(turns, state, _messages(reader, refs_of(state)))
        part = _Part(
            state["from"],
            record["turns"],
            state["marksFrom"],
            record["marks"],
            freeze(turns),
            freeze(state["marks"]),
        )
        kept.older[index] = part
        _keep_older(kept, index)
        return part

    # -- checkpoints ---------------------------------------------------------------------------
    def checkpoint(self, reader: EventReader, count: int) -> None:
        """At the end of a turn whose last event is event ``count - 1``: store the fold's
        state once :data:`EVERY` events were written since the latest checkpoint (the
        caller writes the session's events)."""
        session_id = reader.session_id
        if session_id in self._marks and count - self._marks[session_id] < EVERY:
            return
        latest, at = self._latest(session_id)
        mark = self._marks[session_id] = latest["events"] if latest is not None else 0
        if count - mark < EVERY:
            return
        stream = events_stream(session_id)
        kept = self._folds.get(session_id)
        folded = self.fold_at(session_id, count)
        wrote = kept is not None and kept.fold is folded and kept.base == at
        state, since, marks, base = self._after(session_id, latest, wrote)
        if folded is None or folded.before > since:
            kept, folded = None, self._refold(reader, state, count)
        if folded.view["events"] != count:
            return  # fewer stored than the turn wrote (a read racing a write): next time
        last = self.world.stream_read(stream, count - 1, count)
        digest = self.world.stream_digest(stream, count, base)
        if len(last) != 1 or digest is None:
            return
        record: Checkpoint = {
            "fold": FOLD_VERSION,
            "events": count,
            "last": last[0],
            "digest": digest,
            "turns": folded.before + len(folded.view["turns"]),
            "since": since,
            "marks": folded.marks_before + len(folded.view.get("marks", [])),
            # zlib's fastest level: a third of the default level's time (a 100 KB state of
            # 50-step turns: 0.5 -> 0.16 ms) for ~6% more bytes (6.2 -> 6.6 KB).
            "data": zlib.compress(encode(fold_state(folded, since, marks), "a session's view"), 1),
        }
        index = self.world.stream_append(checkpoint_stream(session_id), record)
        self._marks[session_id] = count
        if kept is not None and kept.fold is folded:  # the turns before are the record's now
            if kept.due is None:  # the record as `_part` reads it, from the fold (texts held)
                self._keep_part(kept, index, record, since, marks)
            trim(folded, record["turns"], record["marks"])
            kept.base = index

    @staticmethod
    def _keep_part(kept: _Kept, index: int, record: Checkpoint, since: int, marks: int) -> None:
        """Keep checkpoint record ``index`` (just written from ``kept``'s fold, from turn
        ``since`` and mark ``marks`` on) as `_part` decodes it: the turns and marks the fold
        lets go, texts and all, so the next page of them reads nothing back (decoding it
        read every event of its turns again to fill their texts: ~10% of a text step's CPU)."""
        folded = kept.fold
        skip = max(0, since - folded.before)
        turns = [
            kept.frozen.get(folded.before + skip + i + 1) or freeze(turn)
            for i, turn in enumerate(folded.view["turns"][skip:])
        ]
        held_marks = folded.view.get("marks", [])[max(0, marks - folded.marks_before) :]
        kept.older[index] = _Part(
            folded.before + skip,
            record["turns"],
            max(marks, folded.marks_before),
            record["marks"],
            FrozenList(turns),
            freeze(held_marks),
        )
        _keep_older(kept, index)

    def _after(
        self, session_id: str, latest: Checkpoint | None, wrote: bool = False
    ) -> tuple[FoldState | None, int, int, tuple[int, Any] | None]:
        """What the next checkpoint follows: the latest's state, turns and marks it holds
        after (it holds that one's last turn again) and its events and digest, when the
        latest is one this fold reads; else (None, 0, 0, None): it starts afresh. ``wrote``:
        the latest is the record the kept fold wrote last, from the state it holds: the
        record is not decoded again (the state given is None) while its last event is the
        stored one (~1% of a text step's CPU: a 100 KB state every other turn)."""
        if latest is not None and wrote and self._last_stored(session_id, latest):
            return None, max(0, latest["turns"] - 1), latest["marks"], _base(latest)
        state = self._state_of(session_id, latest) if latest is not None else None
        if latest is None or state is None:
            return None, 0, 0, None
        return state, max(0, latest["turns"] - 1), latest["marks"], _base(latest)

    def _refold(self, reader: EventReader, state: FoldState | None, count: int) -> ViewFold:
        """A fold of the first ``count`` events from checkpoint ``state`` (restored without the
        turns stored before it, not read again), or afresh."""
        session_id = reader.session_id
        folded = restored(session_id, state, [], []) if state else ViewFold(session_id)
        start = folded.view["events"]
        stream = events_stream(session_id)
        folded.feed(reader.read(start, self.world.stream_read(stream, start, count), refs=True))
        return folded

    def _state_of(self, session_id: str, record: Checkpoint) -> FoldState | None:
        """The fold state checkpoint ``record`` of ``session_id`` holds, when it is of this
        fold's version, whole, and its last event is still the one stored there (else None:
        it took other events than those stored now, or cannot be read)."""
        return _decoded(record) if self._last_stored(session_id, record) else None

    def _last_stored(self, session_id: str, record: Checkpoint) -> bool:
        """Whether checkpoint ``record`` is of this fold's version and its last event is
        still the one stored there (else it took other events than those stored now)."""
        count = record["events"] if _current(record) else 0
        if not isinstance(count, int) or count <= 0:
            return False
        stored = self.world.stream_read(events_stream(session_id), count - 1, count)
        return stored == [record.get("last")]

    def _latest(self, session_id: str) -> tuple[Checkpoint | None, int]:
        """The session's latest checkpoint (None: none) and its index."""
        name = checkpoint_stream(session_id)
        end = self.world.stream_length(name)
        items = self.world.stream_read(name, end - 1, end) if end else []
        return (cast(Checkpoint, items[0]) if items and _current(items[0]) else None), end - 1

    def _restore(self, reader: EventReader) -> _Kept | None:
        """The fold of ``reader``'s session as its latest checkpoint stored it, holding that
        checkpoint's turns only, when it is one this fold reads (see :meth:`_state_of`; else
        None: fold afresh)."""
        session_id = reader.session_id
        name = checkpoint_stream(session_id)
        end = self.world.stream_length(name)
        records = self.world.stream_read(name, end - 1, end) if end else []
        if not records or not _current(records[0]):
            return None
        latest = cast(Checkpoint, records[0])
        state = self._state_of(session_id, latest)
        if state is None:
            return None
        folded = restored(session_id, state, [], [])
        kept = _Kept(folded, latest["events"], latest["digest"], end - 2)
        numbers = {t.get("number", 0) for t in state["turns"]}
        kept.due = (state, numbers) if refs_of(state) else None  # read as pages show them
        self._fill(reader, kept, range(1, 2))  # the first message (a listing's row) now
        return kept


def _base(record: Checkpoint) -> tuple[int, Any]:
    """The events a checkpoint took and their digest (what the next one's digest follows)."""
    return record["events"], record["digest"]


def _keep_older(kept: _Kept, new: int) -> None:
    """Let ``kept``'s oldest decoded records but the ``new`` one go beyond what its latest
    page at the held turns needed (at least :data:`_RECORDS_KEPT`). Oldest first, not least
    recently used: a page walks its records newest first, so with fewer kept than it needs,
    an LRU order let go each time the one the next page reads first, and every view decoded
    them all again (turns of ~300 events: 10 records a page, ~100 ms a view). A walk further
    back lets go the record it passed last (not needed by the next page)."""
    while len(kept.older) > max(_RECORDS_KEPT, kept.reach + 1):
        del kept.older[min(i for i in kept.older if i != new)]


def _take_part(
    part: _Part, lo: int, hi: int, turns: dict[int, Any], parts: list[list[Any]]
) -> None:
    """Add checkpoint ``part``'s turns ``lo`` to ``hi`` to ``turns`` (a later record's copy,
    taken first, counts) and its marks of them to ``parts``."""
    low = lo if lo > 1 else 0
    for turn in part.held:
        number = turn.get("number", 0)
        if lo <= number <= hi and number not in turns:
            turns[number] = turn
    parts.append([m for m in part.held_marks if low <= m["turn"] <= hi])


def _frozen_turns(kept: _Kept, start: int, end: int) -> list[Any]:
    """``kept``'s held turns ``start`` to ``end`` (positions) but its last, frozen once."""
    folded = kept.fold
    before, held = folded.before, folded.view["turns"]
    frozen = kept.frozen
    if len(frozen) > len(held):
        kept.frozen = frozen = {n: t for n, t in frozen.items() if n > before}
    out = []
    for i in range(start, min(end, len(held) - 1)):
        number = before + i + 1
        if number not in frozen:
            frozen[number] = freeze(held[i])
        out.append(frozen[number])
    return out


def _decoded(record: Any) -> FoldState | None:
    """The fold state a checkpoint record holds (None: not of this version, or damaged)."""
    if not _current(record):
        return None
    try:
        state = decode(zlib.decompress(record["data"]))
    except (zlib.error, TypeError, ValueError, KeyError, WorldError):
        return None
    return cast(FoldState, state) if isinstance(state, dict) else None


def _messages(reader: EventReader, refs: set[int]) -> dict[int, str]:
    """The texts of history items ``refs``, turns' messages: read as stored (each whole in
    its item), in one read; one stored in another form through ``reader``."""
    spans = runs(sorted(refs))
    pairs = [(start, start + n) for start, n in zip(spans[::2], spans[1::2], strict=True)]
    if len(pairs) > SPANS:  # one read (a world may read each span on its own)
        pairs = [(pairs[0][0], pairs[-1][1])]
    found: dict[int, str] = {}
    for start, end in pairs:
        for offset, item in enumerate(reader.world.stream_read(reader.history, start, end)):
            content = item.get("content") if isinstance(item, dict) else None
            if start + offset in refs and isinstance(content, str):
                found[start + offset] = content
    return found | reader.texts(refs - found.keys())


def _current(record: Any) -> bool:
    """Whether ``record`` is a checkpoint this fold reads (of its version)."""
    return isinstance(record, dict) and record.get("fold") == FOLD_VERSION


def _pickled(rest: SessionView) -> SessionView:
    try:  # pickle: four times faster than deepcopy on plain data
        copied: SessionView = pickle.loads(pickle.dumps(rest, pickle.HIGHEST_PROTOCOL))
    except Exception:
        copied = copy.deepcopy(rest)
    return copied


TAIL = 16


def summary(session_id: str, tail: Sequence[Mapping[str, Any]]) -> SessionRow:
    """The row of ``sessions()`` from the last :data:`TAIL` events only (cheap for many
    sessions): status from the fold, counts from the latest event that carries them."""
    return ViewFold(session_id).feed(tail).row()
