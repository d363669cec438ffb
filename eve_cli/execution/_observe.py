"""Watchers of the events this process stores: a server's metrics count what its drives do.

A watcher is told each event when it is first stored (a replay that finds an event stored
already tells no one), with its session's id, on the thread that stored it. It must be quick
and must not raise: it runs inside a step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

EventWatcher = Callable[[str, str, Mapping[str, Any]], None]

# Read at every event; a tuple replaced whole, so a reader never sees one half changed.
WATCHERS: tuple[EventWatcher, ...] = ()


def observe_events(watcher: EventWatcher) -> Callable[[], None]:
    """Tell ``watcher(session_id, type, event)`` of every event stored from now on; returns
    the call that stops it."""
    global WATCHERS
    WATCHERS = (*WATCHERS, watcher)

    def stop() -> None:
        global WATCHERS
        WATCHERS = tuple(w for w in WATCHERS if w is not watcher)

    return stop
