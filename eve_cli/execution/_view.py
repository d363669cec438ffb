"""Session views kept as their sessions grow: each fed only the events appended since
(the fold itself, and the view's types, are `eve_cli.execution._fold`'s)."""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eve_cli.execution._fold import (
    ActionView,
    SessionRow,
    SessionView,
    StepView,
    TurnView,
    ViewFold,
    fold,
)
from eve_cli.execution._frozen import freeze
from world import World

__all__ = [
    "TAIL",
    "ActionView",
    "SessionRow",
    "SessionView",
    "StepView",
    "TurnView",
    "ViewCache",
    "ViewFold",
    "fold",
    "summary",
]


class _Kept:
    """A session's fold as kept: the digest of the first ``count`` events (what was checked
    against the stream, at most what the fold took) and its finished turns frozen."""

    __slots__ = ("count", "digest", "fold", "frozen")

    def __init__(self, fold: ViewFold, count: int, digest: Any, frozen: list[Any]) -> None:
        self.fold, self.count, self.digest, self.frozen = fold, count, digest, frozen


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
    """

    def __init__(self, world: World, size: int = 32) -> None:
        self.world = world
        self.size = size
        self._folds: OrderedDict[str, _Kept] = OrderedDict()

    def fold_at(self, session_id: str, count: int) -> ViewFold | None:
        """The kept fold of ``session_id`` if it has taken exactly ``count`` events, else
        None: the writer of event ``count`` feeds it then, and with ``count`` the stream's
        length its status and row are the stored events' (no read)."""
        kept = self._folds.get(session_id)
        return kept.fold if kept is not None and kept.fold.view["events"] == count else None

    def forget(self, session_id: str) -> None:
        """Drop the kept fold (what it was fed may not have been stored)."""
        self._folds.pop(session_id, None)

    def view(
        self, session_id: str, stream: str, read: Callable[[int], list[dict[str, Any]]]
    ) -> SessionView:
        """The view of ``session_id`` whose events are ``stream``; ``read(start)`` returns
        the stored events from ``start`` (as readers see them)."""
        kept = self._folds.pop(session_id, None)
        if kept is not None and self.world.stream_digest(stream, kept.count) != kept.digest:
            kept = None  # rewritten or damaged since: read it all again
        checked = (kept.count, kept.digest) if kept is not None else None
        folded = kept.fold if kept is not None else ViewFold(session_id)
        folded.feed(read(folded.view["events"]))
        # What was checked just now is not read again: only the events fed since.
        digest = self.world.stream_digest(stream, folded.view["events"], checked)
        if digest is None and kept is not None and checked is not None:
            # Fed more than is stored (a write failed after the fold took it): fold afresh.
            folded, kept = ViewFold(session_id), None
            folded.feed(read(0))
            digest = self.world.stream_digest(stream, folded.view["events"])
        frozen = kept.frozen if kept is not None else []
        folded.times()
        if digest is not None:
            self._folds[session_id] = _Kept(folded, folded.view["events"], digest, frozen)
            while len(self._folds) > self.size:
                self._folds.popitem(last=False)
        return _copy(folded.view, frozen)


def _copy(view: SessionView, frozen: list[Any]) -> SessionView:
    """A copy of ``view`` sharing nothing changeable with the fold. Events change only the
    last turn, so each turn before it is frozen once (into ``frozen``) and shared from then
    on; the rest is copied afresh."""
    turns = view["turns"]
    while len(frozen) < len(turns) - 1:
        frozen.append(freeze(turns[len(frozen)]))
    rest: SessionView = {**view, "turns": turns[len(frozen) :]}
    try:  # pickle: four times faster than deepcopy on plain data
        copied: SessionView = pickle.loads(pickle.dumps(rest, pickle.HIGHEST_PROTOCOL))
    except Exception:
        copied = copy.deepcopy(rest)
    copied["turns"][:0] = frozen
    return copied


TAIL = 16


def summary(session_id: str, tail: Sequence[Mapping[str, Any]]) -> SessionRow:
    """The row of ``sessions()`` from the last :data:`TAIL` events only (cheap for many
    sessions): status from the fold, counts from the latest event that carries them."""
    return ViewFold(session_id).feed(tail).row()
