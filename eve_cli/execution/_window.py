"""A session's window of its history: the messages the model sees (summary items left out),
their indexes in the history stream and the current summary — what a turn sends and what a
reader shows, read without the harness that runs turns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eve_cli._session import SUMMARY_ROLE, Snapshot, history_stream, summary_message
from eve_cli.execution._lost import check_window
from eve_cli.execution._replies import resolve
from eve_cli.execution._streams import KEY, strip_key
from eve_cli.models import Message, message_tokens
from world import World


def read_window(world: World, snap: Snapshot) -> tuple[list[Message], list[int], str | None]:
    """The snapshot's window of its history stream: the messages (summary items left out),
    their indexes in the stream, and the text of the current summary, if any."""
    start = snap.history_start
    read = world.stream_read(history_stream(snap.id), start, snap.history_len)
    check_window(snap.id, start, read)
    items = resolve(world, snap.id, start, read)
    state = extend_window(world, snap, items, None)
    return state.messages, state.indexes, state.summary


def _summary_text(world: World, snap: Snapshot, items: list[Message]) -> str | None:
    if snap.summary_at is None:
        return None
    at = snap.summary_at - snap.history_start
    found = items[at : at + 1] if at >= 0 else []
    found = found or world.stream_read(
        history_stream(snap.id), snap.summary_at, snap.summary_at + 1
    )
    check_window(snap.id, snap.summary_at, found)
    return str(found[0].get("content") or "") if found else None


@dataclass
class WindowState:
    """A window's first ``count`` items as the model sees them (``last`` the last of those
    items, as read): messages (summary items left out), their indexes in the stream, the
    current summary's text and the sum of the messages' token estimates."""

    key: tuple[int, int | None]  # history_start, summary_at, summary
    count: int
    last: Any
    messages: list[Message]
    indexes: list[int]
    summary: str | None
    tokens: int


def extend_window(
    world: World, snap: Snapshot, items: list[Message], kept: WindowState | None
) -> WindowState:
    """The window state of ``items`` (read with their keys or without): ``kept`` extended by
    the items after it when it is of the same window and its items are these very objects
    (the executor hands out the same ones only while the stream's digest of them is
    unchanged), else built afresh. A turn then costs the messages appended since the last,
    not the whole window."""
    key = (snap.history_start, snap.summary_at)
    if (
        kept is not None
        and kept.key == key
        and 0 < kept.count <= len(items)
        and items[kept.count - 1] is kept.last
    ):
        messages, indexes, tokens = kept.messages, kept.indexes, kept.tokens
        first, summary = kept.count, kept.summary
    else:
        messages, indexes, tokens = [], [], 0
        first, summary = 0, _summary_text(world, snap, items)
    for offset in range(first, len(items)):
        item = items[offset]
        if item.get("role") != SUMMARY_ROLE:
            message = strip_key(item) if KEY in item else item
            messages.append(message)
            indexes.append(snap.history_start + offset)
            tokens += message_tokens(message)
    last = items[-1] if items else None
    return WindowState(key, len(items), last, messages, indexes, summary, tokens)


def window_messages(messages: list[Message], summary: str | None) -> list[Message]:
    """What the model sees: the summary first, then the window."""
    return [summary_message(summary), *messages] if summary else list(messages)
