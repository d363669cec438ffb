"""The SSE decoder against the WHATWG event-stream rules, in any fragmentation."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from eve_cli.models._sse import SSEDecoder, SSEEvent

STREAM = (
    "\ufeff: a comment\n"
    "event: greet\r\n"
    "id: 42\r"
    "data: first\n"
    "data:second\n"
    "data:  two spaces\n"
    "retry: 1500\n"
    "\n"
    "data\n"
    "\n"
    "unknown: field\n"
    "retry: soon\n"
    "data: é ✓\n"
    "\r\n"
    "event: lonely\n"
    "\n"
    "data: cut off"
)
EXPECTED = [
    SSEEvent(data="first\nsecond\n two spaces", event="greet", id="42", retry=1500),
    SSEEvent(data="", event="message", id="42"),
    SSEEvent(data="é ✓", event="message", id="42"),
]


def decode(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    decoder.close()
    return events


def test_fields_comments_line_endings_and_unfinished_event() -> None:
    # An event type without data dispatches nothing; an event without its blank line is dropped.
    assert decode([STREAM.encode()]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM.encode())), max_size=12))
def test_any_fragmentation_gives_the_same_events(cuts: list[int]) -> None:
    raw = STREAM.encode()
    points = [0, *sorted(cuts), len(raw)]
    chunks = [raw[a:b] for a, b in itertools.pairwise(points)]
    assert decode(chunks) == EXPECTED


def test_crlf_split_across_chunks_is_one_line_ending() -> None:
    assert decode([b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]) == [
        SSEEvent(data="a"),
        SSEEvent(data="b"),
    ]


def test_id_with_nul_is_ignored() -> None:
    assert decode([b"id: 1\n\nid: x\x00y\ndata: d\n\n"]) == [SSEEvent(data="d", id="1")]
