"""Stream items a repair replaced (`world.LostItem`), as eve meets them (issue 22).

Readers read around them: a lost event is shown as one `event.lost` event at its index (the
events after it as they are), a lost text as :data:`LOST_TEXT`. The model's context cannot:
a history item the session's window holds (a message, a reply, a tool call or its result) or
the delta events a reply's text is kept in — the model would see a conversation that never
was — so a drive that needs one stops with :class:`ContextLostError`, which says so and what
to do. Items before the window (cleared, compacted) are never needed.
"""

from __future__ import annotations

from typing import Any

from eve_cli._events import Event
from eve_cli._session import history_stream
from world import CorruptJournalError, LostItem

LOST_EVENT = "event.lost"
LOST_TEXT = "[lost in a repair: its bytes are in quarantine/]"


def lost_event(session_id: str, index: int) -> Event:
    """The event readers show at ``index`` for an event a repair replaced."""
    return {
        "type": LOST_EVENT,
        "index": index,
        "sessionId": session_id,
        "error": f"event {index} was lost in a repair (its bytes are in quarantine/); "
        "the events after it are shown",
    }


class ContextLostError(CorruptJournalError):
    """The session's model context needs a history item a repair replaced: it cannot go on
    (`file`: the history stream, `offset`: the item)."""

    def __init__(self, session_id: str, index: int, what: str = "a message of its window") -> None:
        super().__init__(
            history_stream(session_id),
            index,
            "lost item",
            what=f"history item {index} of session {session_id} ({what}) was lost in a repair "
            "(its bytes are in quarantine/), and the model's context needs it",
            advice="this session cannot go on: start a new one with `eve chat` (`eve inspect` "
            "shows what it holds)",
        )
        self.session_id = session_id
        self.index = index


def check_window(session_id: str, first: int, items: list[Any]) -> None:
    """Raise `ContextLostError` when ``items`` (history items ``first``... the model is to
    see) hold one a repair replaced."""
    for offset, item in enumerate(items):
        if isinstance(item, LostItem):
            raise ContextLostError(session_id, first + offset)
