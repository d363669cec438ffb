"""The persisted form of a session (D8): what survives between turns and processes.

Only data lives here: where history sits in the session's history stream, durable state,
pending input requests, queued deliveries, counters, the agent folder and the ``-m`` override.
Model objects, tools, instructions and credentials are rebuilt from the agent folder at every
turn. The snapshot is small and constant in size: history itself is an append-only stream of
which the snapshot records only the window (``history_start``, ``history_len``) and where the
compaction summary is (``summary_at``: an item of that stream, role ``summary``).

Version 3, the one form (frozen with store format 2; earlier versions were pre-release):
fields under short names (:data:`CODES`), the ones equal to a *base* the reader has too left
out: the session's constants (:func:`session_base`, from the run family's meta) for a
driver's input, the driver generation's own snapshot for a turn's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, NotRequired, Required, TypedDict, cast

from eve_cli._events import EventData
from eve_cli._json import JSONObject

if TYPE_CHECKING:
    from eve_cli._schedules import ScheduleMark
    from eve_cli.models import Message

SNAPSHOT_VERSION = 3


class ForkOrigin(TypedDict):
    """Where a fork was made: the session, its checkpoint and when (epoch seconds)."""

    session: str
    checkpoint: str
    at: float
    by: NotRequired[dict[str, str]]  # who asked for the fork (a principal's claims)


class SessionMeta(TypedDict, total=False):
    """A session's constants, kept once with its run family (``engine.info(sid).meta``),
    as ``Runtime.create_session`` and a fork write them; a creator may add its own keys
    (``create_session(meta=)``), which readers of this type do not see."""

    eve: int
    token: str
    agentDir: str | None
    model: str | None
    mode: str
    agent: str
    created: float
    forkedFrom: ForkOrigin
    owner: dict[str, str]  # who created it (a principal's claims), when made by one
    schedule: ScheduleMark  # `eve_cli._schedules`


class Resolution(TypedDict, total=False):
    """The answer to a pending request: ``answer`` to a question, ``outcome`` (rerun |
    failed | result, with ``result``) to an interrupted call's, else ``approved``."""

    answer: str
    approved: bool
    always: bool  # approved for every later call of the tool too
    outcome: str
    result: str


class InputResponse(TypedDict, total=False):
    """An answer to a pending request as delivered (``Runtime.respond``): its request's id
    and what the answer says (as :class:`Resolution` names it)."""

    requestId: Required[str]
    answer: str
    approved: bool
    always: bool
    outcome: str
    result: str


class Delivered(TypedDict, total=False):
    """A delivery to a session's hook as the harness reads it (``harness.expand_delivery``):
    ``kind`` message (``text``, ``policy`` steer | queue, ``outputSchema`` of the answer to
    the turn it starts), responses (``responses``), cancel, or a session operation (clear,
    compact, reset, move: to ``agent``, in ``agentDir``). ``b``: who sent it (SPEC §18);
    ``d``: a message's delivery id; ``e``: what the session driver took with a message."""

    kind: str
    text: str
    policy: str
    outputSchema: JSONObject
    responses: list[InputResponse]
    agent: str
    agentDir: str | None
    b: dict[str, str]
    d: int
    e: list[Delivered]


class CompactMessage(TypedDict, total=False):
    """How a user message is delivered, and kept once in the session's inbox: its text
    (``m``), policy (``p``, when not steer), answer schema (``o``) and sender (``b``)."""

    m: Required[str]
    p: str
    o: JSONObject
    b: dict[str, str]


class PendingRequest(TypedDict, total=False):
    """An input request a turn waits on, as the snapshot keeps it (the ``input.requested``
    event carries the same fields but ``step``)."""

    requestId: Required[str]
    kind: Required[str]  # approval | question | outcome | limit; cancelled once the turn is
    callId: str
    tool: str
    arguments: Any
    question: str
    options: list[str] | None
    limit: str  # token | time | cost | turn_token | turn_cost
    grant: float  # what continuing adds (tokens, seconds or dollars)
    message: str
    step: int
    attempt: int  # outcome: the run of the call that was interrupted (1: the first)
    resolution: Resolution  # set when answered; acted on at the next step


# What a pending request keeps that its ``input.requested`` event does not carry.
_SNAPSHOT_ONLY = frozenset({"step", "grant", "attempt", "resolution"})


def requested_event(request: PendingRequest) -> EventData:
    """The data of ``request``'s ``input.requested`` event: its fields, in order, but those
    only the snapshot keeps."""
    # Every other field of PendingRequest is one of EventData's, of the same type: a filter
    # over keys mypy cannot follow.
    return cast(EventData, {k: v for k, v in request.items() if k not in _SNAPSHOT_ONLY})


class SnapshotData(TypedDict, total=False):
    """A snapshot as stored (:meth:`Snapshot.to_data`): version ``v``, then each field that
    differs from its base under its code (:data:`CODES`; ``changes_since`` gives the same
    form without ``v``)."""

    v: int
    id: str
    k: str | None  # token
    a: str | None  # agent_dir
    an: str | None  # agent_name
    m: str | None  # model
    o: str  # mode
    c: float  # created_at
    g: int  # gen
    t: int  # turns
    s: int  # steps
    n: int  # model_calls
    x: int  # tokens
    xa: int  # token_allowance
    ta: float  # time_allowance
    co: float  # cost
    ca: float  # cost_allowance
    xt: int  # turn_tokens
    ct: float  # turn_cost
    rp: int  # repairs
    os: JSONObject | None  # turn_schema
    hs: int  # history_start
    hl: int  # history_len
    sa: int | None  # summary_at
    cp: int  # compactions
    st: JSONObject  # state
    ap: list[str]  # approved_tools
    p: list[PendingRequest]  # pending
    q: list[Delivered]  # queued
    tk: str | None  # task
    pa: str | None  # parent
    ck: str | None  # cancel_token
    e: str | None  # ended


@dataclass
class Snapshot:
    """A session between two durable actions (copied, never shared, across runs)."""

    id: str
    token: str | None = None
    agent_dir: str | None = None
    # The agent's name: what serves the session (any folder of that name), not where it was.
    agent_name: str | None = None
    model: str | None = None  # the -m override; None = the agent's own model
    mode: str = "conversation"
    created_at: float = 0.0
    gen: int = 0  # driver generation (continue-as-new count)
    turns: int = 0
    steps: int = 0
    model_calls: int = 0
    tokens: int = 0
    token_allowance: int = 0
    time_allowance: float = 0.0
    cost: float = 0.0  # US dollars of the model calls so far (known prices only)
    cost_allowance: float = 0.0
    turn_tokens: int = 0  # ``tokens`` when this turn began (or was let go past its budget)
    turn_cost: float = 0.0  # ``cost`` likewise
    repairs: int = 0  # this turn's answers sent back for not matching the output schema
    turn_schema: JSONObject | None = None  # the output schema its message came with
    history_start: int = 0
    history_len: int = 0
    summary_at: int | None = None  # history index of the current summary item
    compactions: int = 0
    state: JSONObject = field(default_factory=dict)
    approved_tools: list[str] = field(default_factory=list)
    pending: list[PendingRequest] = field(default_factory=list)
    queued: list[Delivered] = field(default_factory=list)
    task: str | None = None  # the task of a task-mode (sub-agent) session
    parent: str | None = None  # parent session id of a sub-agent session
    # A sub-agent session watches its root session's hook for cancel at step boundaries.
    cancel_token: str | None = None
    ended: str | None = None  # completed | failed | cancelled, for task sessions

    def to_data(self, base: Snapshot | None = None) -> SnapshotData:
        """Plain data; fields equal to ``base`` (default: at their default) are left out (the
        snapshot is journaled at every turn boundary, so its size is paid per turn), and so
        is ``id``: the run that reads the snapshot knows it (the session's run id, or its
        parent's for a turn). Read it back with the same ``base``."""
        against = base._values(copy=False) if base is not None else _DEFAULTS
        data = {  # (only what is kept is copied)
            CODES[k]: _copied(v)
            for k, v in self._values(copy=False).items()
            if k != "id" and v != against.get(k, _MISSING)
        }
        data["v"] = SNAPSHOT_VERSION
        return _as_data(data)

    @classmethod
    def from_data(cls, data: SnapshotData, id: str = "", base: Snapshot | None = None) -> Snapshot:
        """Read a snapshot; ``id`` when the data has none; ``base``: what :meth:`to_data` was
        given."""
        named = migrate({k: _copied(v) for k, v in data.items()})  # never alias recorded input
        values = {k: v for k, v in named.items() if k in _KNOWN}
        if base is not None:  # (only what the data leaves out is copied)
            kept = base._values(copy=False).items()
            values = {**{k: _copied(v) for k, v in kept if k != "id" and k not in values}, **values}
        values.setdefault("id", id)
        return cls(**values)

    def _values(self, *, copy: bool) -> dict[str, Any]:
        """Every field by name; ``copy``: lists and dicts copied deeply (what
        ``dataclasses.asdict`` gives, without its cost: this runs several times a turn)."""
        values = self.__dict__  # the fields in their order, set by `__init__` (~18 a turn)
        if len(values) != len(_FIELD_NAMES):  # something else set on it: the fields alone
            values = {name: getattr(self, name) for name in _FIELD_NAMES}
        if not copy:
            return dict(values)
        return {name: _copied(v) for name, v in values.items()}

    def copy(self) -> Snapshot:
        """A copy sharing nothing changeable (an empty list or dict included)."""
        return Snapshot(
            **{
                name: (copy.deepcopy(v) if v else type(v)()) if type(v) in (dict, list) else v
                for name, v in self._values(copy=False).items()
            }
        )

    def changes_since(self, before: Snapshot) -> SnapshotData:
        """The fields that differ from ``before`` (what a turn returns instead of the whole
        snapshot: the driver already has ``before``)."""
        old, new = before._values(copy=False), self._values(copy=False)
        return _as_data({CODES[k]: _copied(v) for k, v in new.items() if old[k] != v and k != "id"})

    def patched(self, changes: SnapshotData) -> Snapshot:
        """A copy with ``changes`` (from :meth:`changes_since`) applied."""
        data = self._values(copy=True)
        data.update({NAMES[k]: copy.deepcopy(v) for k, v in changes.items() if k in NAMES})
        return Snapshot(**data)


# The stored name of each field (journaled 2-3 times a turn: short). Append-only: a code
# never changes its meaning ("su" was version 1's inline summary).
CODES = {
    "id": "id", "token": "k", "agent_dir": "a", "model": "m", "mode": "o", "created_at": "c",
    "gen": "g", "turns": "t", "steps": "s", "model_calls": "n", "tokens": "x",
    "token_allowance": "xa", "time_allowance": "ta", "history_start": "hs",
    "cost": "co", "cost_allowance": "ca", "turn_tokens": "xt", "turn_cost": "ct",
    "repairs": "rp", "turn_schema": "os",
    "history_len": "hl", "summary_at": "sa", "compactions": "cp",
    "state": "st", "approved_tools": "ap", "pending": "p", "queued": "q", "task": "tk",
    "parent": "pa", "cancel_token": "ck", "ended": "e", "agent_name": "an",
}  # fmt: skip
NAMES = {code: name for name, code in CODES.items()}


def _as_data(coded: dict[str, Any]) -> SnapshotData:
    # Each field's value under its code: SnapshotData declares the same type for each code as
    # Snapshot for its field, a correspondence (CODES) mypy cannot follow.
    return cast(SnapshotData, coded)


_MISSING = object()
_FIELD_NAMES = tuple(f.name for f in fields(Snapshot))
_KNOWN = frozenset(_FIELD_NAMES)


def _copied(value: Any) -> Any:
    return copy.deepcopy(value) if value and type(value) in (dict, list) else value


_DEFAULTS: dict[str, Any] = {
    f.name: (f.default_factory() if f.default_factory is not MISSING else f.default)
    for f in fields(Snapshot)
    if f.default is not MISSING or f.default_factory is not MISSING
}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """The field names of stored snapshot ``data`` (version :data:`SNAPSHOT_VERSION`); any
    other version is refused (a newer one needs a newer eve; older ones were pre-release)."""
    version = data.pop("v", 1)
    if version != SNAPSHOT_VERSION:
        newer = isinstance(version, int) and version > SNAPSHOT_VERSION
        raise ValueError(
            f"session snapshot version {version!r} is "
            + ("newer than this eve" if newer else "a pre-release form this eve does not read")
            + f" ({SNAPSHOT_VERSION}); "
            + ("upgrade eve" if newer else "read it with the version that wrote it")
        )
    return {NAMES.get(k, k): v for k, v in data.items()}


def session_base(meta: Mapping[str, Any], agent: str | None = None) -> Snapshot:
    """The constants of a session as its run family's meta holds them (see
    ``Runtime.create_session``): the base of every session driver's input (version 3).
    ``agent``: the agent it was moved to, if it was (its events say)."""
    return Snapshot(
        id="",
        token=meta.get("token"),
        agent_dir=meta.get("agentDir"),
        agent_name=agent or meta.get("agent"),
        model=meta.get("model"),
        mode=meta.get("mode") or "conversation",
        created_at=float(meta.get("created") or 0.0),
    )


def events_stream(session_id: str) -> str:
    return f"events.{session_id}"


def history_stream(session_id: str) -> str:
    return f"history.{session_id}"


SUMMARY_ROLE = "summary"  # a history item holding a compaction summary (not sent as such)
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"


def summary_message(summary: str) -> Message:
    """How a summary reaches the model: the first user message of the window."""
    return {"role": "user", "content": SUMMARY_PREFIX + summary}
