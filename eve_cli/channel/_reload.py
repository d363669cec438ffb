"""Hot reload of the agent folder for `eve dev`.

Watches the folder with watchfiles; after each batch of saved changes it asks the runtime to load
the agent again. The runtime swaps the definition only when the new one loads, so a broken edit
keeps the last good definition serving; its error (which names file and line) goes to the log.
Sessions pick the new definition up at their next turn, parked ones included, because the
runtime rebuilds tools and instructions from the current definition for every turn (SPEC D8).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

import watchfiles


class ReloadResult(TypedDict):
    """One reload: whether the new definition loaded, when, and what it said."""

    ok: bool
    at: str  # ISO 8601, UTC
    agent: str | None  # the agent now serving (the last good one when not ok)
    changed: str  # the files of the batch, relative to the folder
    error: str | None  # the load error (file and line) when not ok


class DevInfo(TypedDict):
    """``dev`` of ``GET /eve/v1/info``."""

    watching: str
    agent: str
    last: ReloadResult | None


@dataclass
class DevState:
    """What `eve dev` tells the browser view (`GET /eve/v1/info` → ``dev``)."""

    watching: str  # the agent folder
    agent: str  # the name of the definition serving now
    last: ReloadResult | None = None

    def as_json(self) -> DevInfo:
        return {"watching": self.watching, "agent": self.agent, "last": self.last}


def _describe(changes: set[tuple[watchfiles.Change, str]], root: Path) -> str:
    names = set()
    for _, path in changes:
        try:
            names.add(str(Path(path).relative_to(root)))
        except ValueError:
            names.add(path)
    return ", ".join(sorted(names))


async def watch_agent(
    directory: Path,
    reload: Callable[[], str],
    log: Callable[[str], None],
    stop: asyncio.Event,
    debounce_ms: int = 100,
    state: DevState | None = None,
) -> None:
    """Reload on every change under ``directory`` until ``stop`` is set.

    ``reload`` loads and installs the agent, returning its name, or raises an exception whose
    message says what is wrong (file and line). Each result is kept in ``state``.
    """
    root = directory.resolve()
    log(f"watching {root} for changes")
    async for changes in watchfiles.awatch(
        root, stop_event=stop, debounce=debounce_ms, step=25, recursive=True
    ):
        changed = _describe(changes, root)
        at = datetime.now(UTC).isoformat(timespec="milliseconds")
        try:
            name = reload()
        except Exception as exc:
            log(f"reload failed, still serving the last good agent: {exc}")
            if state is not None:
                state.last = ReloadResult(
                    ok=False, at=at, agent=state.agent, changed=changed, error=str(exc)
                )
            continue
        log(f"reloaded agent {name!r} from {root} (changed: {changed})")
        if state is not None:
            state.agent = name
            state.last = ReloadResult(ok=True, at=at, agent=name, changed=changed, error=None)
