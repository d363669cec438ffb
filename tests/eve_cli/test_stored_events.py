"""Events are stored compactly (a message's text is a reference to its history item) and read
back exactly as SPEC §8 shapes them, whatever form they were stored in."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from eve_cli._events import Event, EventData
from eve_cli._keys import Key, generation, turn
from eve_cli.execution._event_form import unpack
from eve_cli.execution._keys import EventKeys, HistoryKeys
from eve_cli.execution._replies import resolve
from eve_cli.execution._stored_events import REF, EventReader, stored_event
from eve_cli.execution._streams import KeyedStream
from eve_cli.harness._input import compact_message, expand_delivery
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, call, reply
from world import Engine, LocalWorld, MemoryWorld

EXAMPLE = Path(__file__).resolve().parents[2] / ".workflow-data.example"
ECHO = '''
from eve_cli import tool


@tool
def echo(text: str) -> str:
    """Echo."""
    return "echo: " + text
'''


def converse(rt: Runtime, messages: list[str]) -> str:
    async def main() -> str:
        sid = await rt.create_session()
        for message in messages:
            await rt.deliver(sid, message)
            await rt.drive(sid)
        return sid

    return asyncio.run(main())


def check_spec_shape(sid: str, events: Sequence[Mapping[str, Any]]) -> None:
    for position, event in enumerate(events):
        assert event["index"] == position
        assert event["sessionId"] == sid
        assert isinstance(event["type"], str)
        datetime.fromisoformat(event["at"])
        assert not [k for k in event if k.startswith("_")], event  # no storage fields


def old_form(world: Any, sid: str, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The session's stored events as eve stored them before references: text inline, the
    continuation token in every ``session.waiting``, ``at`` in epoch seconds."""
    history = resolve(world, sid, 0, world.stream_read(f"history.{sid}"))
    out = []
    for stored in world.stream_read(f"events.{sid}"):
        item = cast(dict[str, Any], unpack(stored))  # read as a plain mapping
        event = {}
        for k, v in item.items():
            event["text" if k == "_h" else k] = history[v]["content"] if k == "_h" else v
            if k == "at":
                event["at"] = (round(meta["created"] * 1000) + v) / 1000
                if item["type"] == "session.waiting":
                    event["continuationToken"] = meta["token"]
        out.append(event)
    return out


def test_stored_events_refer_to_history_and_read_as_spec(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    agent = make_agent(
        script=[
            reply("Let me check.", call("echo", text="hi")),
            reply("", call("echo", text="again")),  # a step that says nothing
            reply("All done."),
            reply("Bye"),
        ],
        tools={"e": ECHO},
    )
    rt = Runtime(data_dir=tmp_path / "data", agent_dir=agent)
    sid = converse(rt, ["first question", "second"])
    events = rt.events(sid)
    check_spec_shape(sid, events)
    received = [(e["turnId"], e["text"]) for e in events if e["type"] == "message.received"]
    assert received == [("t1", "first question"), ("t2", "second")]
    completed = [e["text"] for e in events if e["type"] == "message.completed"]
    assert completed == ["Let me check.", "", "All done.", "Bye"]

    # Stored: the texts are not copied into the event stream, only referenced; an empty one
    # is stored as it is (nothing to look up).
    stored = [unpack(i) for i in rt.world.stream_read(f"events.{sid}")]
    messages = [i for i in stored if i["type"] in ("message.received", "message.completed")]
    said = [i for i in messages if i.get("text") != ""]
    assert len(messages) == 6 and len(said) == 5
    assert all("text" not in i and "_h" in i for i in said)
    # Nor the session's continuation token (the run's meta has it): readers see it again;
    # times count whole milliseconds from the session's creation (also in the meta).
    meta = rt.engine.info(sid).meta
    token = meta["token"]
    assert all(isinstance(i["at"], int) and 0 <= i["at"] < 60_000 for i in stored)
    waiting = [i for i in stored if i["type"] == "session.waiting"]
    assert len(waiting) == 3 and not any("continuationToken" in i for i in waiting)
    read = [e for e in events if e["type"] == "session.waiting"]
    assert [list(e)[:3] for e in read] == [["type", "at", "continuationToken"]] * 3
    assert {e["continuationToken"] for e in read} == {token}

    # The same events stored in the earlier form (text and token inline) read identically.
    memory = MemoryWorld()
    for item in old_form(rt.world, sid, meta):
        memory.stream_append(f"events.{sid}", item)
    assert EventReader(memory, sid).read(0, memory.stream_read(f"events.{sid}")) == events

    # Every reader agrees: a tail from the start, a negative start, the view's texts.
    async def tail() -> list[Event]:
        seen = []
        async for event in rt.tail(sid, 0):
            seen.append(event)
            if len(seen) == len(events):
                return seen
        return seen

    assert asyncio.run(asyncio.wait_for(tail(), 10)) == events
    assert rt.events(sid, -3) == events[-3:]
    view = rt.session(sid)
    assert [t["input"] for t in view["turns"]] == ["first question", "second"]
    assert [s["text"] for t in view["turns"] for s in t["steps"]] == completed
    rt.close()


def test_example_data_is_stored_in_the_current_form_and_reads_as_spec(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(EXAMPLE, data)
    world = LocalWorld(data)
    try:
        [sid] = world.families()
        stored = world.stream_read(f"events.{sid}")
        meta = Engine(world, {}).info(sid).meta  # its `created`: the base of each `at`
        events = EventReader(world, sid, lambda: meta).read(0, stored)
    finally:
        world.close()
    check_spec_shape(sid, events)
    assert len(events) == len(stored)
    for item, event in zip(stored, events, strict=True):
        assert "type" not in item and unpack(item)["type"] == event["type"]  # the compact form
        assert isinstance(item["a"], int)  # milliseconds since the session's creation
        created = datetime.fromisoformat(event["at"]).timestamp() - item["a"] / 1000
        assert abs(created - meta["created"]) < 0.001
    texts = [e["text"] for e in events if e["type"] == "message.completed"]
    assert texts and all(isinstance(t, str) for t in texts)
    assert any(REF in i for i in stored)  # replies refer to history, not copied


def test_a_parent_replayed_after_its_turn_reuses_the_turns_keys(
    make_agent: AgentFactory, monkeypatch: Any
) -> None:
    from eve_cli.execution import _streams

    loaded: list[int] = []
    real_load = _streams.KeyedStream._load

    def counting_load(self: _streams.KeyedStream) -> dict[str, int]:
        keys = real_load(self)
        loaded.append(len(keys))
        return keys

    monkeypatch.setattr(_streams.KeyedStream, "_load", counting_load)
    script = [reply("", call("echo", text=str(i))) for i in range(30)] + [reply("done")]
    rt = Runtime(agent_dir=make_agent(script=script, tools={"echo": ECHO}))
    try:
        converse(rt, ["go"])
    finally:
        rt.close()
    # Without the reuse, the driver's replay after the turn reads back all ~200 keys the
    # turn stored (events and history) just to find its own few.
    assert loaded and max(loaded) < 5, loaded


def test_a_kept_keyed_stream_is_dropped_when_another_writer_appended(tmp_path: Path) -> None:
    from eve_cli.execution._executor import Executor

    world = LocalWorld(tmp_path / "data")
    try:
        executor = Executor(world)
        first = executor.keyed("events.s_x", 3)
        first.append(Key("a"), {"y": 1})
        assert executor.keyed("events.s_x", 3) is first
        LocalWorld(tmp_path / "data").stream_append("events.s_x", {"y": 2, "_k": "3:b"})
        again = executor.keyed("events.s_x", 3)
        assert again is not first
        assert again.append(Key("b"), {"y": 2}) is None  # the other writer's item is known
        assert again.append(Key("c"), {"y": 3}) == 2  # its index
        assert executor.keyed("events.s_x", 4) is not again
    finally:
        world.close()


def test_a_message_delivery_is_stored_compact_and_read_whole() -> None:
    assert compact_message("hi", "steer") == {"m": "hi"}
    whole = {"kind": "message", "text": "hi", "policy": "queue"}
    assert expand_delivery(compact_message("hi", "queue")) == whole
    # What earlier versions delivered, and every other kind, reads as sent.
    for sent in (whole, {"kind": "cancel"}, {"kind": "responses", "responses": []}):
        assert expand_delivery(sent) == sent


def test_event_keys_their_fields_imply_are_stored_compact_and_derived_back() -> None:
    world, name = MemoryWorld(), "events.s_keys"
    step = {"turnId": "t3", "stepIndex": 0}
    t3 = turn(3)
    first, second = t3.step(0).call(0), t3.step(0).call(1)
    implied: list[tuple[Key, str, dict[str, Any]]] = [
        (generation(2).waiting, "session.waiting", {"turns": 2, "steps": 2}),
        (t3.start, "turn.started", {"turnId": "t3"}),
        (
            t3.first.received,
            "message.received",
            {"turnId": "t3", "_h": 4, "disposition": "started"},
        ),
        (t3.step(0).start, "step.started", step),
        (first.delta(0, 6), "message.appended", {**step, "delta": "field "}),
        (first.delta(6, 3), "message.appended", {**step, "delta": "abc"}),
        (first.completed, "message.completed", {**step, "role": "assistant", "_h": 5}),
        (
            t3.step(0).done,
            "step.completed",
            {**step, "usage": {"inputTokens": 1, "outputTokens": 2}},
        ),
        (t3.end, "turn.completed", {"turnId": "t3"}),
    ]
    whole: list[
        tuple[Key, str, dict[str, Any]]
    ] = [  # keys their fields do not imply: stored as they are
        (
            t3.delivery(1).received,
            "message.received",
            {"turnId": "t3", "_h": 6, "disposition": "steered"},
        ),
        (second.delta(0, 2), "message.appended", {**step, "delta": "hi"}),
        (second.completed, "message.completed", {**step, "role": "assistant", "_h": 7}),
        (first.delta(9, 1), "message.appended", {**step, "delta": "too long"}),
    ]
    assert [k.text for k, _, _ in implied + whole] == [
        "g2:wait", "t3:start", "t3:in:m", "t3:0:start", "t3:0:0:d@0+6", "t3:0:0:d@6+3", "t3:0:0",
        "t3:0:done", "t3:end", "t3:p1:m", "t3:0:1:d@0+2", "t3:0:1", "t3:0:0:d@9+1",
    ]  # fmt: skip
    stream = KeyedStream(world, name, 2, EventKeys())
    for n, (key, kind, data) in enumerate(implied + whole):
        assert stream.append(key, stored_event(kind, 1.0, cast(EventData, data))) == n
    stored = [item["_k"] for item in world.stream_read(name)]
    assert stored == [2, 2, 2, 2, [2, 0], [2, 6], 2, 2, 2] + [f"2:{k.text}" for k, _, _ in whole]
    # A new process derives the same keys: nothing is appended twice.
    again = KeyedStream(world, name, 2, EventKeys())
    for key, kind, data in implied + whole:
        assert again.append(key, stored_event(kind, 1.0, cast(EventData, data))) is None
    assert sorted(again.keys_starting(first.delta_head)) == [
        "t3:0:0:d@0+6",
        "t3:0:0:d@6+3",
        "t3:0:0:d@9+1",
    ]
    assert KeyedStream(world, name, 3, EventKeys()).index_of(t3.start) is None
    # Readers never see the stored key.
    assert not [
        k
        for e in EventReader(world, "s_keys").read(0, world.stream_read(name))
        for k in e
        if k.startswith("_")
    ]


def test_history_keys_of_a_turns_message_and_answer_are_stored_compact() -> None:
    world, name = MemoryWorld(), "history.s_keys"
    t4 = turn(4)
    items: list[tuple[Key, dict[str, Any]]] = [
        (t4.first.user, {"role": "user", "content": "hi"}),
        (t4.step(0).call(0).reply, {"role": "assistant", "content": "yo", "tool_calls": []}),
        (t4.tool("call_1").message, {"role": "tool", "tool_call_id": "call_1", "content": "ok"}),
        (t4.delivery(2).user, {"role": "user", "content": "steered"}),
        (
            t4.step(1).call(1).reply,
            {"role": "assistant", "content": "second call", "tool_calls": []},
        ),
    ]
    texts = [k.text for k, _ in items]
    assert texts == ["t4:in:u", "t4:0:0:a", "t4:call_1:r", "t4:p2:u", "t4:1:1:a"]
    stream = KeyedStream(world, name, 3, HistoryKeys())
    for key, item in items:
        stream.put(key, item)
    stored = [i["_k"] for i in world.stream_read(name)]
    assert stored == [[3, 4], [3, 4, 0], "3:t4:call_1:r", "3:t4:p2:u", "3:t4:1:1:a"]
    again = KeyedStream(world, name, 3, HistoryKeys())
    assert [again.put(key, item) for key, item in items] == [0, 1, 2, 3, 4]  # found, not added
    assert world.stream_length(name) == 5
