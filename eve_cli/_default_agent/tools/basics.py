"""Harmless tools of the built-in agent, plus one that needs the user's approval."""

from datetime import UTC, datetime

from eve_cli import State, always, define_state, tool

notes: State[list[str]] = define_state("notes", [])


@tool
def get_current_time() -> str:
    """The current date and time (UTC, ISO 8601)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


@tool
def count_words(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


@tool(approval=always())
def save_note(text: str) -> str:
    """Save a note in this session (asks the user first)."""
    saved = notes.update(lambda current: [*current, text])
    return f"saved note {len(saved)}: {text}"
