"""`eve chat -r`: pick one of the recent sessions (title = first message, age, status) with
the arrow keys and Enter (prompt_toolkit's choice prompt); Ctrl-C leaves without one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eve_cli.cli._sessions import age, is_empty, title, with_live_status

if TYPE_CHECKING:
    from eve_cli.runtime import Runtime

RECENT = 20  # sessions the picker offers, most recently active first


def recent(rt: Runtime, count: int = RECENT) -> list[dict[str, Any]]:
    """The most recently active sessions that ever got a message, with their live status and
    their title."""
    rows = [row for row in rt.sessions() if not is_empty(row)][:count]
    for row in with_live_status(rt, rows):
        row["title"] = title(rt, str(row["id"]))
    return rows


def label(row: dict[str, Any]) -> str:
    words = str(row.get("title") or "(no message)")
    return f"{words:<60}  {age(row.get('updatedAt')):>9}  {row.get('status')}  {row.get('id')}"


def pick(rows: list[dict[str, Any]]) -> str:
    """The id of the session picked among ``rows``.

    Raises:
        KeyboardInterrupt: the user left the picker (Ctrl-C).
    """
    from prompt_toolkit.shortcuts import choice

    options = [(str(row["id"]), label(row)) for row in rows]
    picked: str = choice(message="Open which session? (↑/↓, Enter)", options=options)
    return picked
