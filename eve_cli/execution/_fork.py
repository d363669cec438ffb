"""Forking a session at a checkpoint: a new session whose history and state are the
original's as of that point (SPEC §15).

The checkpoints are the events that carry ``ck`` (``[journal position, history length]``,
written by ``SessionHost.emit``): ``session.waiting`` (between turns: ``--at T`` is after turn
``T``), ``step.completed`` and ``turn.waiting`` (``--at T.S``: after step ``S`` of turn ``T``;
where the turn then parked, if it did). A fork is `world.Engine.fork` at that position with
the events up to the checkpoint's own, the history up to its length, and the sessions of the
sub-agents started before it whole: driving the fork replays every recorded model answer and
tool result up to the point and runs what follows live, in the fork alone. The original is
only read (another process may be driving it) and keeps working.

Lineage: the fork's meta holds ``forkedFrom`` (``{"session", "checkpoint", "at"}``); the
original's forks are the sessions whose meta names it (`lineage`).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from eve_cli._facade import By
from eve_cli._session import ForkOrigin, Snapshot, events_stream, history_stream, session_base
from eve_cli.execution._keys import EventKeys
from eve_cli.execution._streams import KeyedStream
from world import Engine, World, stream_family

_TURN = re.compile(r"[0-9]{1,9}")
_STEP = re.compile(r"([0-9]{1,9})\.([0-9]{1,9})")


@dataclass(frozen=True)
class Checkpoint:
    """A point a session can be forked at: ``ref`` (``T`` after turn T, ``T.S`` after step
    S of turn T), the event marking it (``event``: its index), the journal position and the
    history length there."""

    ref: str
    kind: str  # the marking event's type
    event: int
    at: int
    history: int


class Lineage(TypedDict):
    """Where a session was forked from (``{"session", "checkpoint", "at"}``; None: it was not)
    and the sessions forked from it."""

    forkedFrom: ForkOrigin | None
    forks: list[str]


class Forked(TypedDict):
    """What a fork returns: the new session, the one it was forked from, and where."""

    sessionId: str
    forkedFrom: str
    checkpoint: str


class ForkPointError(LookupError):
    """No checkpoint of that name (the message lists the ones there are)."""


def checkpoints(events: Sequence[Mapping[str, Any]]) -> list[Checkpoint]:
    """The checkpoints of a session's events, in stream order."""
    numbers: dict[str, int] = {}
    out: list[Checkpoint] = []
    for event in events:
        turn = event.get("turnId")
        if isinstance(turn, str) and turn not in numbers:
            numbers[turn] = len(numbers) + 1
        mark = event.get("ck")
        if not (isinstance(mark, list) and len(mark) == 2):
            continue
        kind = str(event.get("type"))
        if kind == "session.waiting":
            ref = str(event.get("turns", len(numbers)))
        elif isinstance(turn, str):
            step = event.get("stepIndex")
            if not isinstance(step, int):  # a turn parks after its last step
                last = next(
                    (c for c in reversed(out) if c.ref.startswith(f"{numbers[turn]}.")), None
                )
                step = int(last.ref.split(".")[1]) if last is not None else 0
            ref = f"{numbers[turn]}.{step}"
        else:
            continue
        out.append(Checkpoint(ref, kind, int(event["index"]), int(mark[0]), int(mark[1])))
    return out


def choose(found: list[Checkpoint], ref: str | None, sid: str) -> Checkpoint:
    """The checkpoint ``ref`` names (None: the latest); the latest of that name when there
    are several (a turn that parked after its step: where it parked)."""
    if not found:
        raise ForkPointError(
            f"session {sid} has no checkpoint to fork at (it was recorded by an eve before "
            "forks, or has not run yet)"
        )
    if ref is None:
        return found[-1]
    ref = ref.strip()
    if not (_TURN.fullmatch(ref) or _STEP.fullmatch(ref)):
        raise ValueError(f"--at takes TURN or TURN.STEP (e.g. 2 or 2.0), not {ref!r}")
    if _STEP.fullmatch(ref):
        turn, step = ref.split(".")
        ref = f"{int(turn)}.{int(step)}"
    else:
        ref = str(int(ref))
    named = [c for c in found if c.ref == ref]
    if not named and "." not in ref:  # no wait between that turn and the next: its last step
        named = [c for c in found if c.ref.split(".")[0] == ref and "." in c.ref]
    if not named:
        listed = ", ".join(dict.fromkeys(c.ref for c in found))
        raise ForkPointError(f"session {sid} has no checkpoint {ref} (checkpoints: {listed})")
    return named[-1]


def forks_stream(sid: str) -> str:
    """The stream listing the ids of the sessions forked from ``sid`` (``{"session": id}``
    each). It belongs to no family (`world.stream_family`): a family's streams take appends
    from the process driving it only (`World.stream_append`), and the original may be driven
    by another process; any process appends to this one. So it outlives the original's
    removal (a few bytes a fork)."""
    return f"forks:{sid}"


def _list_fork(world: World, sid: str, new: str) -> None:
    # Durable before the fork exists (`World.create_family`): whoever sees the fork sees its id.
    world.stream_append(forks_stream(sid), {"session": new})


def fork_streams(
    world: World, sid: str, point: Checkpoint, events: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """What of the session's streams the fork copies: its events up to the checkpoint's, its
    history up to its length, and the streams of sub-agent sessions started before it."""
    streams = {events_stream(sid): point.event + 1, history_stream(sid): point.history}
    children = {
        str(e["childSessionId"])
        for e in events[: point.event + 1]
        if e.get("type") == "task.started" and isinstance(e.get("childSessionId"), str)
    }
    for name in world.stream_names(family=sid):
        run = name.split(".", 1)[1] if stream_family(name) == sid else ""
        if any(run == c or run.startswith(c + ".") for c in children):
            streams[name] = world.stream_length(name)
    return streams


def generation_checkpoints(engine: Engine, sid: str, meta: Mapping[str, Any]) -> list[Checkpoint]:
    """The turn boundaries of a session whose events carry no ``ck`` (recorded before forks,
    by a format-1 store's eve: a migration to format 2 keeps its events as they were):
    the start of each driver generation (`Engine.generations`), its history as its snapshot
    says, its events those keyed with an earlier generation (every item is keyed ``<gen>:``,
    and a generation's come after the one before's)."""
    world = engine.world
    name = events_stream(sid)
    stream = KeyedStream(world, name, 0, EventKeys())
    items = world.stream_read(name)
    gens = [_key_gen(stream.key_of(item)) for item in items]
    out = []
    for at, _, data in engine.generations(sid):
        snap = Snapshot.from_data(data, sid, session_base(meta))
        cut = next((i for i, g in enumerate(gens) if g is not None and g >= snap.gen), len(gens))
        out.append(Checkpoint(str(snap.turns), "generation", cut - 1, at, snap.history_len))
    return out


def _key_gen(key: str) -> int | None:
    head = key.split(":", 1)[0]
    return int(head) if head.isdigit() else None


async def fork_session(
    engine: Engine,
    sid: str,
    events: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    ref: str | None,
    by: By | None = None,
) -> Forked:
    """Fork session ``sid`` (its stored ``events`` and ``meta``) at checkpoint ``ref`` (None:
    the latest; ``by``: who asked, kept in the fork's ``forkedFrom``); returns
    ``{"sessionId", "forkedFrom", "checkpoint"}``. A session recorded
    before events carried checkpoints forks at its turn boundaries."""
    found = checkpoints(events)
    if not found:
        found = await engine.off_loop(generation_checkpoints, engine, sid, meta)
    point = choose(found, ref, sid)
    world = engine.world
    streams = fork_streams(world, sid, point, events)
    origin = {
        "session": sid,
        "checkpoint": point.ref,
        "at": time.time(),
        **({"by": by} if by else {}),
    }
    new = f"s_{secrets.token_hex(12)}"
    # Listed first: a crash in between leaves an id naming no session, which `lineage` skips;
    # listed after, a crash would leave a fork its original never shows.
    await engine.io(_list_fork, world, sid, new)
    # A sub-agent's snapshot names its parent session (``parent``): the fork's names the fork.
    await engine.fork(sid, new, at=point.at, streams=streams, meta={**meta, "forkedFrom": origin},
                      aliases={sid: new})  # fmt: skip
    return {"sessionId": new, "forkedFrom": sid, "checkpoint": point.ref}


def lineage(
    world: World,
    sid: str,
    meta: Mapping[str, Any],
    meta_of: Callable[[str], Mapping[str, Any] | None],
) -> Lineage:
    """``{"forkedFrom": {"session", "checkpoint", "at"} | None, "forks": [ids]}`` of ``sid``
    (its ``meta``): its forks from its fork list (`forks_stream`), each one kept only if
    ``meta_of`` (a session's meta; None: no such session) says it exists and was forked from
    ``sid``."""
    forks: set[str] = set()
    for item in world.stream_read(forks_stream(sid)):
        fork = item.get("session") if isinstance(item, dict) else None  # a LostItem: skipped
        if isinstance(fork, str) and fork not in forks:
            found = meta_of(fork)
            if found is not None and (found.get("forkedFrom") or {}).get("session") == sid:
                forks.add(fork)
    origin = meta.get("forkedFrom")
    kept = cast(ForkOrigin, origin) if isinstance(origin, dict) else None  # as the fork wrote it
    return {"forkedFrom": kept, "forks": sorted(forks)}
