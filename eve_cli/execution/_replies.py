"""History items as stored and as read: a model reply may refer to its delta events.

A reply's text is streamed into ``message.appended`` events as it arrives; storing it in the
history item too would store it twice. History item form 2: an assistant reply whose text the
delta events of that very call hold exactly stores, in place of ``content``, ``e``: the
events' indexes as runs ``[start, count, start, count, ...]`` (one run when they are
contiguous, as they are unless another writer appended between them), and ``n``: the text's
length; an empty ``tool_calls`` is left out. Form 1 (``content`` inline) is every other item.

Every reader of history reads through :func:`resolve`, which puts ``content`` (and
``tool_calls``) back, reading the referred events once for all the items it is given. A
referred event that is missing, not a text delta, or deltas of another length than ``n``
raise :class:`HistoryDamageError`: the text is lost with the events, and is never read as "".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from eve_cli._keys import delta_start
from eve_cli._session import events_stream
from eve_cli.execution._event_form import TYPE_CODES, exact_ints
from eve_cli.execution._lost import ContextLostError
from world import CorruptJournalError, LostItem, World

if TYPE_CHECKING:  # annotations only: a reader of stored replies needs no harness
    from eve_cli.harness import ArgumentError, KeptReply, Reply, StreamedText
    from eve_cli.models import Message

SPANS = 16  # spans of events read apart at most (else one read over all of them)
EVENTS = "e"  # form 2: the reply's delta events, as runs [start, count, ...]
LENGTH = "n"  # form 2: the length of the text those events hold
_APPENDED = TYPE_CODES["message.appended"]


class HistoryDamageError(CorruptJournalError):
    """A history item's text cannot be read back: the events it refers to are damaged.

    Damage of stored data, as a bad record of the stream would be: the engine stops the drive
    with it rather than failing the turn (``file`` names the events stream, ``offset`` the
    history item)."""

    def __init__(self, session_id: str, index: int, why: str) -> None:
        what = (
            f"history item {index} of session {session_id} (a model reply) refers to {why}, "
            "so the reply's text cannot be read"
        )
        super().__init__(events_stream(session_id), index, "reply events damaged", what)
        self.session_id = session_id
        self.index = index


def journaled(reply: Reply, streamed: StreamedText) -> KeptReply:
    """The step result a model call journals for ``reply``: its text, or, when this run's
    delta events hold the text whole (and items a step appends are durable before its
    record), only its length (``ds``): the text is not stored twice."""
    out: KeptReply = {"text": reply.text, "tool_calls": reply.tool_calls, "usage": reply.usage}
    if reply.call_errors:
        out["calls"] = reply.call_errors
    if reply.reasoning is not None:
        out["reasoning"] = reply.reasoning
    if reply.text and streamed.holds(reply.text):
        out["ds"] = len(out.pop("text"))
    return out


def reply_message(kept: KeptReply, text: str | None = None) -> Message:
    """The history item (form 1) of a journaled reply ``kept``; ``text`` when it has none."""
    message: Message = {
        "role": "assistant",
        "content": kept["text"] if text is None else text,
        "tool_calls": [{k: c[k] for k in ("id", "name", "arguments")} for c in kept["tool_calls"]],
    }
    if "reasoning" in kept:
        message["reasoning"] = kept["reasoning"]
    return message


def reply_text(kept: KeptReply, streamed: StreamedText) -> tuple[str, list[int]] | None:
    """The text of a journaled reply of length ``ds`` and the delta events holding it (None
    when they do not: the text is lost with them)."""
    found = streamed.text_events()
    if found is None or len(found[0]) != kept.get("ds") or not found[1]:
        return None
    return found


def call_errors(kept: KeptReply) -> dict[str, ArgumentError]:
    """The argument errors of a journaled reply's tool calls, by call id."""
    return dict(kept.get("calls") or {})


def referring(message: Mapping[str, Any], events: list[int]) -> dict[str, Any]:
    """The stored form of reply ``message`` whose text the events ``events`` (in text order)
    hold exactly."""
    item = {k: v for k, v in message.items() if k != "content"}
    if item.get("tool_calls") == []:
        del item["tool_calls"]
    item[EVENTS] = runs(events)
    item[LENGTH] = len(str(message.get("content") or ""))
    return item


def runs(indexes: list[int]) -> list[int]:
    """``indexes`` as ``[start, count, ...]`` runs of consecutive indexes."""
    out: list[int] = []
    for index in indexes:
        if out and out[-2] + out[-1] == index:
            out[-1] += 1
        else:
            out += [index, 1]
    return out


def refers(item: Any) -> bool:
    """Whether a stored history item is a reply of form 2 (its text in events)."""
    return isinstance(item, dict) and EVENTS in item and "content" not in item


def event_indexes(item: Mapping[str, Any]) -> list[int]:
    """The events a form-2 item refers to, in text order ([] when ``e`` is malformed)."""
    spans = item.get(EVENTS)
    if not isinstance(spans, list) or len(spans) % 2 or not exact_ints(*spans):
        return []
    return [i for start, count in zip(spans[::2], spans[1::2], strict=True)
            for i in range(start, start + count)]  # fmt: skip


def resolve(
    world: World,
    session_id: str,
    first: int,
    items: list[Any],
    known: Mapping[int, str] | None = None,
    events: Mapping[int, Any] | None = None,
    lost: str | None = None,
) -> list[Any]:
    """``items`` (history items ``first``, ``first + 1``, ..., with or without their keys) as
    readers see them: a form-2 item with its ``content`` again. ``known``: texts this process
    already has, by history index (no read); ``events``: stored events already at hand, by
    index. The other referred events are read in as few stream reads as their spread allows
    (a window's replies: one).

    ``lost``: the text of a reply whose events a repair replaced, for a reader (else
    `ContextLostError`: the model's context would miss it).

    Raises:
        HistoryDamageError: a referred event is missing or does not hold the text.
    """
    out = list(items)
    wanted: list[tuple[int, Any]] = []
    for offset, item in enumerate(items):
        if refers(item):
            text = known.get(first + offset) if known is not None else None
            if text is not None and len(text) == item.get(LENGTH):
                out[offset] = expand(item, text)
            else:
                wanted.append((offset, item))
    if wanted:
        at_hand = _read_events(world, session_id, wanted, events or {})
        for offset, item in wanted:
            if any(isinstance(at_hand.get(i), LostItem) for i in event_indexes(item)):
                if lost is None:
                    raise ContextLostError(session_id, first + offset, "a reply kept in events")
                out[offset] = expand(item, lost)
                continue
            out[offset] = expand(item, _text(session_id, first + offset, item, at_hand))
    return out


def expand(item: Mapping[str, Any], text: str) -> Message:
    """A form-2 ``item`` as form 1, with ``text`` as its content."""
    message = {k: v for k, v in item.items() if k not in (EVENTS, LENGTH)}
    message["content"] = text
    message.setdefault("tool_calls", [])
    return message


def _read_events(
    world: World, session_id: str, wanted: Iterable[tuple[int, Any]], events: Mapping[int, Any]
) -> Mapping[int, Any]:
    needed = sorted({i for _, item in wanted for i in event_indexes(item)} - events.keys())
    if not needed:
        return events
    found = dict(events)
    spans = runs(needed)
    pairs = [(start, start + count) for start, count in zip(spans[::2], spans[1::2], strict=True)]
    if len(pairs) > SPANS:  # one read (a world may make each a round trip: a turn has many)
        pairs = [(pairs[0][0], pairs[-1][1])]
    name = events_stream(session_id)
    for start, end in pairs:
        for offset, event in enumerate(world.stream_read(name, start, end)):
            found[start + offset] = event
    return found


def _text(session_id: str, index: int, item: Mapping[str, Any], events: Mapping[int, Any]) -> str:
    indexes = event_indexes(item)
    if not indexes:
        raise HistoryDamageError(session_id, index, f"malformed events {item.get(EVENTS)!r}")
    parts: list[str] = []
    size = 0
    for i in indexes:
        event = events.get(i)
        if event is None:
            raise HistoryDamageError(session_id, index, f"event {i}, which is missing")
        delta = _delta(event)
        if delta is None:
            raise HistoryDamageError(session_id, index, f"event {i}, which is not a text delta")
        start = _start(event.get("_k"))
        if start is not None and start != size:
            raise HistoryDamageError(
                session_id, index, f"event {i}, a delta at offset {start}, not {size}"
            )
        parts.append(delta)
        size += len(delta)
    if size != item.get(LENGTH):
        raise HistoryDamageError(
            session_id,
            index,
            f"events {indexes[0]}..{indexes[-1]}, whose deltas hold {size} characters, "
            f"not {item.get(LENGTH)}",
        )
    return "".join(parts)


def _delta(event: Any) -> str | None:
    """The text of a stored ``message.appended`` event (event form 2 or 1); None: not one."""
    if not isinstance(event, dict):
        return None
    if "y" in event:
        delta = event.get("d") if event["y"] == _APPENDED else None
    else:
        delta = event.get("delta") if event.get("type") == "message.appended" else None
    return delta if isinstance(delta, str) else None


def _start(key: Any) -> int | None:
    """The text offset a delta's stored key names (``[gen, start]`` or ``...@start+len``)."""
    if isinstance(key, list) and len(key) == 2 and exact_ints(*key):
        return int(key[1])
    return delta_start(key) if isinstance(key, str) else None
