"""Session views kept as their sessions grow: each fed only the events appended since
(the fold itself, and the view's types, are `eve_cli.execution._fold`'s)."""

from __future__ import annotations

import copy
import pickle
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, cast

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
    fill_inputs,
    fold,
    fold_state,
    restored,
)
from eve_cli.execution._frozen import freeze
from eve_cli.execution._replies import runs
from eve_cli.execution._stored_events import EventReader
from world import World, WorldError, decode, encode

__all__ = [
    "TAIL",
    "ActionView",
    "Checkpoint",
    "SessionRow",
    "SessionView",
    "StepView",
    "TurnView",
    "ViewCache",
    "ViewFold",
    "checkpoint_stream",
    "fold",
    "summary",
]


class _Kept:
    """A session's fold as kept: the digest of the first ``count`` events (what was checked
    against the stream, at most what the fold took) and its finished turns frozen. A fold
    restored from a checkpoint hands its first ``given`` turns out as they were decoded,
    once; ``older`` decodes them again to be shared from then on."""

    __slots__ = ("count", "digest", "fold", "frozen", "given", "older")

    def __init__(
        self,
        fold: ViewFold,
        count: int = 0,
        digest: Any = None,
        older: Callable[[], list[TurnView]] | None = None,
        given: int = 0,
    ) -> None:
        self.fold, self.count, self.digest = fold, count, digest
        self.frozen: list[Any] = []
        self.older, self.given = older, given


class Checkpoint(TypedDict):
    """A checkpoint of a session's fold, as stored: the fold's version, the events it took
    (``events``; the last of them as stored, their digest), the turns and marks it had, and
    its state (`FoldState`, msgpack, zlib-compressed)."""

    fold: int
    events: int
    last: Any
    digest: Any
    turns: int
    marks: int
    data: bytes


def checkpoint_stream(session_id: str) -> str:
    """The stream a session's fold is checkpointed to (one of its family's)."""
    return f"views.{session_id}"


EVERY = 512  # events folded at most between a session's checkpoints (at a turn's end)


class ViewCache:
    """Session views folded so far, each fed only the events appended since.

    A fold is reused only while the world's digest of the events it folded is unchanged, so
    damage to stored events is reported on the next read just as a fresh fold reports it. A
    world without digests folds afresh every time. The process that writes a session's
    events feeds them to its kept fold as it writes them (:meth:`fold_at`), so a view after
    a turn reads none of them back; the digest then takes their stored bytes in. Callers get
    a copy of the view; its turns before the last (which events no longer change) are
    read-only and shared by every copy handed out since (see
    :mod:`eve_cli.execution._frozen`): copying them anew for each call cost what the
    session's age does.

    Checkpoints: at the end of a turn, once :data:`EVERY` events were written since the last
    one, the writer stores the fold's state (:meth:`ViewFold.state`: the turns since the last
    checkpoint and what the fold holds besides, its texts as history indexes) in the
    session's :func:`checkpoint_stream` (:meth:`checkpoint`). A process without a kept fold
    starts from the latest one of its fold's version whose last event is still the stored
    one, and folds only the events after it: a view costs the events since the checkpoint
    and the decoding of the turns, not a fold of the session's whole history. A checkpoint
    is believed as the session's snapshot is (the events it took are not read back).
    """

    def __init__(self, world: World, size: int = 32) -> None:
        self.world = world
        self.size = size
        self._folds: OrderedDict[str, _Kept] = OrderedDict()
        self._marks: dict[str, int] = {}  # events taken by a session's latest checkpoint

    def fold_at(self, session_id: str, count: int) -> ViewFold | None:
        """The kept fold of ``session_id`` if it has taken exactly ``count`` events, else
        None: the writer of event ``count`` feeds it then, and with ``count`` the stream's
        length its status and row are the stored events' (no read)."""
        kept = self._folds.get(session_id)
        return kept.fold if kept is not None and kept.fold.view["events"] == count else None

    def forget(self, session_id: str) -> None:
        """Drop the kept fold (what it was fed may not have been stored)."""
        self._folds.pop(session_id, None)
        self._marks.pop(session_id, None)

    def view(self, reader: EventReader, length: int | None = None) -> SessionView:
        """The view of ``reader``'s session (``length``: its events' number, when known)."""
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
        given, kept.given = kept.given, 0
        if kept.older is not None and not given:  # handed out as decoded before: now shared
            again, kept.older = kept.older(), None
            folded.view["turns"][: len(again)] = again
        folded.times()
        if digest is not None:
            kept.count, kept.digest = folded.view["events"], digest
            self._folds[session_id] = kept
            while len(self._folds) > self.size:
                self._folds.popitem(last=False)
        return _copy(folded.view, kept.frozen, given)

    def _read(
        self, reader: EventReader, start: int, length: int | None
    ) -> Sequence[Mapping[str, Any]]:
        """The session's stored events from ``start`` (none from ``length`` on)."""
        if length is not None and start >= length:
            return []
        stream = events_stream(reader.session_id)
        return reader.read(start, self.world.stream_read(stream, start), refs=True)

    # -- checkpoints ---------------------------------------------------------------------------
    def checkpoint(self, reader: EventReader, count: int) -> None:
        """At the end of a turn whose last event is event ``count - 1``: store the fold's
        state once :data:`EVERY` events were written since the latest checkpoint (the
        caller writes the session's events)."""
        session_id = reader.session_id
        mark = self._marks.get(session_id)
        latest: Checkpoint | None = None
        if mark is None:
            latest = self._latest(session_id)
            mark = self._marks[session_id] = latest["events"] if latest is not None else 0
        if count - mark < EVERY:
            return
        if latest is None:
            latest = self._latest(session_id)
        stream = events_stream(session_id)
        # The next checkpoint holds what came since the latest (and that one's last turn
        # again), when the latest is one this fold reads: else it starts afresh.
        state = self._state_of(session_id, latest) if latest is not None else None
        since, marks, base = 0, 0, None
        if latest is not None and state is not None:
            since, marks = max(0, latest["turns"] - 1), latest["marks"]
            base = (latest["events"], latest["digest"])
        folded = self.fold_at(session_id, count)
        if folded is None or folded.before > since:
            # Restored without the turns stored before (not read again), or folded afresh.
            folded = restored(session_id, state, [], []) if state else ViewFold(session_id)
            start = folded.view["events"]
            folded.feed(reader.read(start, self.world.stream_read(stream, start, count), refs=True))
        if folded.view["events"] != count:
            return  # fewer stored than the turn wrote (a read racing a write): next time
        last = self.world.stream_read(stream, count - 1, count)
        digest = self.world.stream_digest(stream, count, base)
        if len(last) != 1 or digest is None:
            return
        kept = fold_state(folded, since, marks)
        record: Checkpoint = {
            "fold": FOLD_VERSION,
            "events": count,
            "last": last[0],
            "digest": digest,
            "turns": folded.before + len(folded.view["turns"]),
            "marks": folded.marks_before + len(folded.view.get("marks", [])),
            "data": zlib.compress(encode(kept, "a session's view"), 9),
        }
        self.world.stream_append(checkpoint_stream(session_id), record)
        self._marks[session_id] = count

    def _state_of(self, session_id: str, record: Checkpoint) -> FoldState | None:
        """The fold state checkpoint ``record`` of ``session_id`` holds, when it is of this
        fold's version, whole, and its last event is still the one stored there (else None:
        it took other events than those stored now, or cannot be read)."""
        count = record["events"] if _current(record) else 0
        if not isinstance(count, int) or count <= 0:
            return None
        stored = self.world.stream_read(events_stream(session_id), count - 1, count)
        return _decoded(record) if stored == [record.get("last")] else None

    def _latest(self, session_id: str) -> Checkpoint | None:
        """The session's latest checkpoint (None: none)."""
        name = checkpoint_stream(session_id)
        end = self.world.stream_length(name)
        items = self.world.stream_read(name, end - 1, end) if end else []
        return cast(Checkpoint, items[0]) if items and _current(items[0]) else None

    def _restore(self, reader: EventReader) -> _Kept | None:
        """The fold of ``reader``'s session as its latest checkpoint stored it, when that
        checkpoint is one this fold reads (see :meth:`_state_of`; else None: fold afresh)."""
        session_id = reader.session_id
        records = self.world.stream_read(checkpoint_stream(session_id))
        if not records or not _current(records[-1]):
            return None
        latest = cast(Checkpoint, records[-1])
        state = self._state_of(session_id, latest)
        if state is None:
            return None
        first, marks = state["from"], state["marksFrom"]  # the turns and marks before its own
        turns, older_marks, inputs = _parts(records[:-1])
        if any(n not in turns for n in range(1, first + 1)) or len(older_marks) < marks:
            return None  # a checkpoint is missing: fold afresh
        inputs.update(state["inputs"])
        texts = _messages(reader, set(inputs.values()))
        fill_inputs(state["turns"], inputs, texts)
        decoded = [turns]  # used once as decoded here; after that, decoded afresh

        def older() -> list[TurnView]:
            """The turns before the latest checkpoint's, decoded (again)."""
            found = decoded.pop() if decoded else _parts(records[:-1])[0]
            out = [found[n] for n in range(1, first + 1)]
            fill_inputs(out, inputs, texts)
            return out

        folded = restored(session_id, state, older(), older_marks[:marks])
        return _Kept(folded, latest["events"], latest["digest"], older, first)


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
    if len(pairs) > _SPANS:  # one read (a world may read each span on its own)
        pairs = [(pairs[0][0], pairs[-1][1])]
    found: dict[int, str] = {}
    items = reader.world.stream_read_spans(reader.history, pairs)
    for (start, _), read in zip(pairs, items, strict=True):
        for offset, item in enumerate(read):
            content = item.get("content") if isinstance(item, dict) else None
            if start + offset in refs and isinstance(content, str):
                found[start + offset] = content
    return found | reader.texts(refs - found.keys())


_SPANS = 16  # spans of history read apart at most (else one read over all of them)


def _parts(
    records: list[Any],
) -> tuple[dict[int, TurnView], list[MarkView], dict[int, int]]:
    """The turns (by number), marks (in order) and the turns' messages (history items by
    turn number) checkpoint ``records`` hold: each holds those since the one before, and
    that one's last turn again (the latest copy counts; one that cannot be read, none)."""
    turns: dict[int, TurnView] = {}
    marks: list[MarkView] = []
    inputs: dict[int, int] = {}
    for record in records:
        state = _decoded(record)
        if state is None:
            continue
        for turn in state["turns"]:
            turns[turn.get("number", 0)] = turn
        inputs.update(state["inputs"])
        del marks[state["marksFrom"] :]
        marks.extend(state["marks"])
    return turns, marks, inputs


def _current(record: Any) -> bool:
    """Whether ``record`` is a checkpoint this fold reads (of its version)."""
    return isinstance(record, dict) and record.get("fold") == FOLD_VERSION


def _copy(view: SessionView, frozen: list[Any], given: int = 0) -> SessionView:
    """A copy of ``view`` sharing nothing changeable with the fold. Events change only the
    last turn, so each turn before it is frozen once (into ``frozen``) and shared from then
    on; the rest is copied afresh. ``given``: the first turns are handed out as they are
    (just decoded from a checkpoint; the fold never reads them, its cache decodes them again
    before sharing them)."""
    turns = view["turns"]
    if given:
        rest: SessionView = {**view, "turns": turns[given:]}
        copied = _pickled(rest)
        copied["turns"][:0] = turns[:given]
        return copied
    while len(frozen) < len(turns) - 1:
        frozen.append(freeze(turns[len(frozen)]))
    copied = _pickled({**view, "turns": turns[len(frozen) :]})
    copied["turns"][:0] = frozen
    return copied


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
