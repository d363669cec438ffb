"""Finding sessions for a person: whether a `running` one is really running (a live process
owns it) or `interrupted` (its turn died with its process), which sessions are empty (no
message ever sent), a session's title (its first message) and age."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from eve_cli.cli._events import one_line

if TYPE_CHECKING:
    from eve_cli.runtime import Runtime

TITLE_EVENTS = 16  # a session's first message is among its first events


def live_status(rt: Runtime, sid: str, status: str) -> str:
    """``status``, but ``interrupted`` for a ``running`` session no live process owns.

    Probes the session's lease (taken and given back at once, as `eve gc` does)."""
    if status != "running":
        return status
    from world import OwnershipError, WorldError

    try:
        rt.world.acquire(sid).release()
    except OwnershipError:
        return "running"
    except WorldError:
        return status
    return "interrupted"


def with_live_status(rt: Runtime, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (``Runtime.sessions()``) with ``interrupted`` where it applies."""
    for row in rows:
        row["status"] = live_status(rt, str(row.get("id")), str(row.get("status")))
    return rows


def is_empty(row: Mapping[str, Any]) -> bool:
    """A session no message was ever sent to (a chat opened and left at once)."""
    return not row.get("turns") and row.get("status") == "waiting"


def title(rt: Runtime, sid: str, limit: int = 60) -> str:
    """The session's first message, as one short line ("" when it has none)."""
    from world import WorldError

    try:
        events = rt.events(sid, 0, end=TITLE_EVENTS)
    except WorldError:  # damaged: `eve doctor` says how; the picker still lists it
        return "(damaged: see eve doctor)"
    for event in events:
        if event.get("type") == "message.received":
            return one_line(str(event.get("text") or ""), limit)
    return ""


def age(updated: Any, now: float | None = None) -> str:
    """``updated`` (ISO time or epoch seconds) as ``just now``, ``5m ago``, ``2d ago``…"""
    if isinstance(updated, int | float):
        moment = float(updated)
    else:
        try:
            moment = datetime.fromisoformat(str(updated).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return ""
    seconds = max(0.0, (now or time.time()) - moment)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return "just now"


def resume_hint(sid: str) -> str:
    return f"resume with: eve resume {sid} (or eve chat -s {sid})"
