"""What to do about a world error, said by eve (world's messages say what and where only).

The CLI and the HTTP channel both add these, so damaged data reads the same everywhere.
"""

from __future__ import annotations

REPAIR_HINT = (
    "run `eve doctor --repair` (it keeps every byte it replaces in quarantine/, never deletes)"
)


def user_message(exc: BaseException) -> str:
    """`exc`'s one-line message for a user, with what to do when it reports damaged data (a
    repair's own verdict, `repairable` False, already says what to do: no loop back to it)."""
    from world import CorruptJournalError

    if isinstance(exc, CorruptJournalError) and exc.repairable:
        return f"{exc}; {REPAIR_HINT}"
    return str(exc)
