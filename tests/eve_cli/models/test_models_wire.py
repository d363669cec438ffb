"""Wire translation properties, over generated histories and fragmentations."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from eve_cli.models._anthropic_wire import to_messages as to_anthropic
from eve_cli.models._openai_wire import ToolCallAssembler

NAMES = st.sampled_from(["read", "write", "list_files"])
ARGS = st.dictionaries(
    st.sampled_from(["path", "text", "n"]),
    st.one_of(st.integers(0, 99), st.sampled_from(["", "a b", '{"x"}', "é"]), st.none()),
    max_size=3,
)


@st.composite
def streamed_calls(draw: st.DrawFn) -> tuple[list[tuple[str, str, dict[str, Any]]], list[Any]]:
    calls = [(f"call_{i}", draw(NAMES), draw(ARGS)) for i in range(draw(st.integers(1, 3)))]
    queues: list[list[dict[str, Any]]] = []
    for index, (call_id, name, args) in enumerate(calls):
        text = json.dumps(args)
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        first_args = draw(st.sampled_from([None, ""]))  # what servers put in the opening chunk
        queue: list[dict[str, Any]] = [
            {"index": index, "id": call_id, "function": {"name": name, "arguments": first_args}}
        ]
        for piece in pieces:
            fragment: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if draw(st.booleans()):  # some servers repeat id and name on every chunk
                fragment["id"] = call_id
                fragment["function"]["name"] = name
            queue.append(fragment)
        queues.append(queue)
    # Interleave the calls' fragments, keeping each call's own order.
    order: list[Any] = []
    while any(queues):
        live = [q for q in queues if q]
        order.append(draw(st.sampled_from(live)).pop(0))
    return calls, order


@given(streamed_calls())
def test_tool_calls_reassemble_from_any_fragmentation(case: Any) -> None:
    calls, fragments = case
    assembler = ToolCallAssembler()
    for fragment in fragments:
        assembler.feed(fragment)

    assert [(c.id, c.name, c.arguments) for c in assembler.finish()] == calls


MESSAGE = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.sampled_from(["", "hi", " "])),
    st.builds(
        lambda t, n: {
            "role": "assistant",
            "content": t,
            "tool_calls": [{"id": f"t{i}", "name": "read", "arguments": {}} for i in range(n)],
        },
        st.sampled_from(["", "ok"]),
        st.integers(0, 2),
    ),
    st.builds(
        lambda e: {"role": "tool", "tool_call_id": "t0", "content": "r", "is_error": e},
        st.booleans(),
    ),
)


@given(st.lists(MESSAGE, max_size=12))
def test_anthropic_turns_alternate_start_with_user_and_lead_with_results(
    history: list[dict[str, Any]],
) -> None:
    _, turns = to_anthropic("", history)

    roles = [turn["role"] for turn in turns]
    assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles))
    for turn in turns:
        assert turn["content"], "no empty turns"
        kinds = [block["type"] for block in turn["content"]]
        assert kinds == sorted(kinds, key=lambda k: k != "tool_result")
        assert all(str(block.get("text", "x")).strip() for block in turn["content"])
    sent = sum(len(t["content"]) for t in turns)
    expected = sum(
        (1 if m.get("content", "").strip() and m["role"] != "tool" else 0)
        + (1 if m["role"] == "tool" else 0)
        + len(m.get("tool_calls", []))
        for m in history
    )
    assert sent in (expected, expected + 1)  # + the opening user turn when one was needed
