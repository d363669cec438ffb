"""The names eve's workflows are registered under in the world (stored in every run's info),
and what their runs are given and return, as journaled."""

from __future__ import annotations

from typing import Literal, Required, TypedDict

from eve_cli._json import JSONObject
from eve_cli._session import Delivered, SnapshotData

SESSION_WORKFLOW = "eve.session"  # one long-lived run per session
TURN_WORKFLOW = "eve.turn"  # a child run of the session's, one per turn


class TurnStart(TypedDict, total=False):
    """How a turn starts (`_driver.take_message`): its message's history index (``h``), its
    delivery id (``d``), who sent it (``b``), the schema of its answer (``o``), and what was
    delivered with it (``e``), which the turn applies at its first step."""

    h: Required[int]
    d: int
    b: dict[str, str]
    o: JSONObject
    e: list[Delivered]


class TurnInput(TypedDict):
    """An ``eve.turn`` run's input: the snapshot (what differs from its driver's) and its
    start."""

    snap: SnapshotData
    start: TurnStart


class TurnResult(TypedDict, total=False):
    """What an ``eve.turn`` run returns: how it ended, the snapshot fields it changed
    (``changes``; ``snap``, whole, for a turn without a ``before``), a task's final ``text``,
    the ``error`` it failed with, and deliveries to hand back to the parent turn."""

    outcome: Required[Literal["completed", "failed", "cancelled"]]
    changes: SnapshotData
    snap: SnapshotData
    text: str
    error: str
    handedBack: list[Delivered]


class SessionResult(TypedDict, total=False):
    """What an ``eve.session`` run returns when it ends (a task session's end, or a failure;
    a session's driver continues as new instead)."""

    status: Required[Literal["completed", "failed", "cancelled"]]
    text: str
    error: str | None
    handedBack: list[Delivered]
