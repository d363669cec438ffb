"""Removing the data of sessions that ended or sat idle: what `eve gc` and a server's
retention share.

A session qualifies by its status and by when anything was last stored to it
(`World.family_usage`). No call removes a session a live process owns: "nobody owns it" is
proven by taking its lease, and the decision is made again under it (a turn run since the
listing keeps the session, as does a message no drive took yet); the world removes it only
if nothing was delivered since (`World.remove_family`'s mark). Leftovers of an interrupted
removal or creation (`World.remnants`) are swept too. Through the `World` interface only:
any world.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from eve_cli._loader import DEFAULT_AGENT_DIR
from eve_cli.runtime import Runtime, RuntimeErrorBase
from world import OwnershipError, WorldError

FINISHED = ("completed", "failed", "cancelled")
FORCED = ("parked", "interrupted")  # removed only when asked (`eve gc --force`)
# What a server's retention removes: ended sessions and those idle between turns, never one
# with a pending request (parked) or a turn under way (running, interrupted).
RETAINED_UNLESS_IDLE = (*FINISHED, "waiting")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `12h`, `7d`, `2w`, or a sum such as `1h30m`, in seconds.

    Raises:
        ValueError: not such a duration; the message says what is expected.
    """
    parts = _DURATION.findall(text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != text.strip().lower():
        raise ValueError(
            f"invalid duration {text!r}: use a number and a unit s, m, h, d or w "
            "(e.g. 30m, 7d, 1h30m)"
        )
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass
class Entry:
    """One session (or leftover) considered by gc."""

    id: str
    status: str
    last_write: float
    bytes: int
    action: str = ""  # removed | would remove | skipped: <why>


def collecting_runtime(where: str | Path) -> Runtime:
    """A runtime on ``where`` for collecting: never the user's agent code, and the built-in
    agent only if a view needs it."""
    return Runtime(where, agent_dir=DEFAULT_AGENT_DIR, load_agent=False)


def collect(rt: Runtime, cutoff: float, allowed: set[str], dry_run: bool) -> list[Entry]:
    """Find (and unless `dry_run`, remove) what was last written before `cutoff` and whose
    status is `allowed`; one entry each, saying what became of it."""
    world = rt.world
    remnants = set(world.remnants())
    entries = []
    for sid in sorted(set(world.families()) | remnants):
        entry = _consider(rt, sid, sid in remnants, cutoff, allowed)
        if entry is None:
            continue
        if not entry.action:
            entry.action = "would remove" if dry_run else _remove(rt, entry, cutoff, allowed)
        entries.append(entry)
    return entries


def removed(entries: list[Entry]) -> list[Entry]:
    """The entries that were (or, in a dry run, would be) removed."""
    return [e for e in entries if not e.action.startswith("skipped")]


def _consider(
    rt: Runtime, sid: str, remnant: bool, cutoff: float, allowed: set[str]
) -> Entry | None:
    try:
        usage = rt.world.family_usage(sid)
    except WorldError as exc:
        return Entry(sid, "damaged", 0.0, 0, action=f"skipped: {exc}")
    if usage.last_write > cutoff:
        return None
    entry = Entry(sid, "", usage.last_write, usage.bytes)
    if remnant:
        entry.status = "leftover"  # an interrupted removal or creation
        return entry
    try:
        entry.status = _status(rt, sid)
    except RuntimeErrorBase:
        return None  # a run of the world that is not an eve session: not ours to remove
    except (WorldError, OSError) as exc:
        entry.status, entry.action = "damaged", f"skipped: {exc}"
        return entry
    if entry.status == "running":
        entry.action = _OWNED
    elif entry.status not in allowed:
        entry.action = f"skipped: {entry.status}" + (
            " (use --waiting)" if entry.status == "waiting" else " (use --force)"
        )
    elif _untaken(rt, sid, entry.status):
        entry.action = _UNTAKEN
    return entry


_OWNED = "skipped: owned by a live process"
_UNTAKEN = "skipped: a delivery waits for the session"


def _untaken(rt: Runtime, sid: str, status: str) -> bool:
    """Whether session `sid`, of `status`, holds a delivery no drive has taken yet:
    acknowledged to its sender, so the session takes it before it may go (its server was
    down, or lost the lease to gc a moment ago). Asked of sessions between turns, whose head
    their last drive wrote as it parked (an interrupted turn's is older than what it took;
    an ended session takes nothing more)."""
    if status not in _BETWEEN_TURNS:
        return False
    return any(f.inbox_end != f.inbox_read for f in rt.world.heads(roots=[sid]))


_BETWEEN_TURNS = ("waiting", "parked")


def _status(rt: Runtime, sid: str) -> str:
    """The session's status; a running one whose lease is free is `interrupted`."""
    status = str(rt.session(sid)["status"])
    if status != "running":
        return status
    try:
        rt.world.acquire(sid).release()
    except OwnershipError:
        return "running"
    return "interrupted"


def _remove(rt: Runtime, entry: Entry, cutoff: float, allowed: set[str]) -> str:
    """Remove one session under its lease, if it still qualifies there; the world removes it
    only if nothing was delivered since gc decided (`World.remove_family`'s mark)."""
    world = rt.world
    try:
        if entry.status == "leftover":
            world.remove_family(entry.id)
            return "removed"
        lease = world.acquire(entry.id)
    except OwnershipError:
        return _OWNED
    except WorldError as exc:
        return f"skipped: {exc}"
    try:
        # Listed before the lease was taken: a delivery or a turn since then keeps it.
        mark = world.inbox_end(entry.id)
        status = str(rt.session(entry.id)["status"])
        status = "interrupted" if status == "running" else status  # the lease is ours
        written = world.family_usage(entry.id).last_write
        if status not in allowed or written > cutoff:
            return f"skipped: changed while gc ran (now {status})"
        if _untaken(rt, entry.id, status):
            return _UNTAKEN
        if not world.remove_family(entry.id, inbox_mark=mark):
            return f"skipped: changed while gc ran (now {status})"
        return "removed"
    except OwnershipError:
        return "skipped: a delivery is in progress"
    except (WorldError, RuntimeErrorBase) as exc:
        return f"skipped: {exc}"
    finally:
        lease.release()
