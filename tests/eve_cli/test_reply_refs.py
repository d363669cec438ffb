"""A model reply's history item refers to its delta events (history item form 2): every
reader sees the text as before, damaged events are reported, and the kept window reads no
event back for replies this process stored."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eve_cli.execution import _replies
from eve_cli.execution._replies import HistoryDamageError, resolve, runs
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, call, reply
from world import LocalWorld, MemoryWorld

ECHO = '''
from eve_cli import tool


@tool
def echo(text: str) -> str:
    """Echo."""
    return "echo: " + text
'''
REPLIES = ["Let me check.", "All done here.", "Bye now"]


def converse(rt: Runtime, messages: list[str]) -> str:
    async def main() -> str:
        sid = await rt.create_session()
        for message in messages:
            await rt.deliver(sid, message)
            await rt.engine.run(sid)
        return sid

    return asyncio.run(main())


def built(root: Path, make_agent: AgentFactory) -> tuple[Path, str, Path]:
    first, *rest = [reply(REPLIES[0], call("echo", text="hi")), *map(reply, REPLIES[1:])]
    agent = make_agent(script=[first, *rest, reply("later")], tools={"e": ECHO})
    rt = Runtime(data_dir=root, agent_dir=agent)
    sid = converse(rt, ["first", "second"])
    rt.close()
    return root, sid, agent


def test_replies_refer_to_one_delta_event_and_read_back_everywhere(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    data, sid, _ = built(tmp_path / "data", make_agent)
    rt = Runtime(data_dir=data, load_agent=False)  # a fresh reader: nothing kept
    stored = rt.world.stream_read(f"history.{sid}")
    replies = [m for m in stored if m["role"] == "assistant"]
    assert ["content" in m for m in replies] == [False] * 3
    assert [m["n"] for m in replies] == [len(t) for t in REPLIES]
    assert "tool_calls" in replies[0] and "tool_calls" not in replies[1]  # [] is left out
    events = rt.world.stream_read(f"events.{sid}")
    # A reply yielded whole (the scripted model's words in one go) is one delta event.
    deltas = [e["d"] for e in events if "d" in e]
    assert deltas == REPLIES
    assert [m["e"] for m in replies] == [[events.index(e), 1] for e in events if "d" in e]

    history = rt.history(sid)
    assert [m["content"] for m in history if m["role"] == "assistant"] == REPLIES
    assert [m.get("tool_calls") for m in history if m["role"] == "assistant"][1:] == [[], []]
    read = rt.events(sid)
    assert [e["text"] for e in read if e["type"] == "message.completed"] == REPLIES
    # A tail read without the deltas before it reads them itself.
    last = max(e["index"] for e in read if e["type"] == "message.completed")
    assert rt.events(sid, last)[0]["text"] == REPLIES[2]
    view = rt.session(sid)
    assert [s["text"] for t in view["turns"] for s in t["steps"]] == REPLIES
    rt.close()


def test_old_inline_items_read_as_before() -> None:
    world = MemoryWorld()
    inline = {"role": "assistant", "content": "kept inline", "tool_calls": []}
    world.stream_append("history.s1", inline)
    assert resolve(world, "s1", 0, world.stream_read("history.s1")) == [inline]


def test_scattered_deltas_read_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    world = MemoryWorld()
    for i in range(40):  # deltas 0, 2, 4 of the first reply; 30 and 31 of the second
        key = [1, {0: 0, 2: 2, 4: 3, 30: 0, 31: 3}.get(i, -1)]
        text = {0: "ab", 2: "c", 4: "de", 30: "xyz", 31: "!"}.get(i)
        world.stream_append("events.s1", {"y": 11, "d": text, "_k": key} if text else {"y": 13})
    items: list[dict[str, Any]] = [
        {"role": "assistant", "e": runs([0, 2, 4]), "n": 5},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "e": runs([30, 31]), "n": 4, "tool_calls": [{"id": "c"}]},
    ]
    assert items[0]["e"] == [0, 1, 2, 1, 4, 1] and items[2]["e"] == [30, 2]
    reads: list[tuple[str, int, int | None]] = []
    original = world.stream_read

    def counted(name: str, start: int = 0, end: int | None = None) -> list[Any]:
        reads.append((name, start, end))
        return original(name, start, end)

    monkeypatch.setattr(world, "stream_read", counted)
    out = resolve(world, "s1", 7, items)
    assert [m.get("content") for m in out] == ["abcde", "hi", "xyz!"]
    assert out[0]["tool_calls"] == [] and out[2]["tool_calls"] == [{"id": "c"}]
    assert reads == [("events.s1", a, b) for a, b in [(0, 1), (2, 3), (4, 5), (30, 32)]]
    # What this process already knows is not read at all.
    reads.clear()
    assert resolve(world, "s1", 7, items[:1], known={7: "abcde"})[0]["content"] == "abcde"
    assert reads == []


def test_the_deltas_of_many_replies_read_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn of many steps refers to more delta spans than `SPANS`: one read over all of
    them (a world where a read is a round trip made one a span: 100 at a turn's end)."""
    world = MemoryWorld()
    for i in range(60):  # the replies' deltas are every third event
        delta = {"y": 11, "d": "ab", "_k": [i, 0]}
        world.stream_append("events.s1", delta if i % 3 == 0 else {"y": 13})
    items: list[dict[str, Any]] = [
        {"role": "assistant", "e": runs([i]), "n": 2} for i in range(0, 60, 3)
    ]
    assert len(items) > _replies.SPANS
    reads: list[tuple[str, int, int | None]] = []
    original = world.stream_read

    def counted(name: str, start: int = 0, end: int | None = None) -> list[Any]:
        reads.append((name, start, end))
        return original(name, start, end)

    monkeypatch.setattr(world, "stream_read", counted)
    assert [m["content"] for m in resolve(world, "s1", 7, items)] == ["ab"] * len(items)
    assert reads == [("events.s1", 0, 58)]


def damaged_copy(data: Path, sid: str, root: Path, change: Any) -> Path:
    """A copy of ``data`` whose events stream is rewritten through ``change(index, item)``
    (an item, or None to cut the stream there)."""
    copy = root / "damaged"
    shutil.copytree(data, copy)
    for suffix in (".msgpack", ".idx"):
        (copy / "streams" / f"events.{sid}{suffix}").unlink()
    source, target = LocalWorld(data), LocalWorld(copy)
    try:
        for index, item in enumerate(source.stream_read(f"events.{sid}")):
            item = change(index, item)
            if item is None:
                break
            target.stream_append(f"events.{sid}", item)
    finally:
        source.close()
        target.close()
    return copy


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("cut", "which is missing"),
        ("shorter", "hold 8 characters, not 14"),
        ("other", "which is not a text delta"),
    ],
)
def test_damaged_delta_events_are_reported_not_read_as_empty(
    tmp_path: Path, make_agent: AgentFactory, damage: str, why: str
) -> None:
    data, sid, agent = built(tmp_path / "data", make_agent)
    world = LocalWorld(data)
    events = world.stream_read(f"events.{sid}")
    stored = world.stream_read(f"history.{sid}")
    world.close()
    # The second reply ("All done here."), history item 3.
    [where] = [i for i, e in enumerate(events) if e.get("d") == REPLIES[1]]
    assert stored[3]["e"] == [where, 1]

    def change(index: int, item: dict[str, Any]) -> dict[str, Any] | None:
        if index != where:
            return item
        if damage == "cut":
            return None
        if damage == "shorter":
            return {**item, "d": "All done"}
        return {**item, "y": 13, "d": None}

    copy = damaged_copy(data, sid, tmp_path, change)
    rt = Runtime(data_dir=copy, load_agent=False)
    with pytest.raises(HistoryDamageError) as raised:
        rt.history(sid)
    message = str(raised.value)
    assert f"history item 3 of session {sid}" in message and why in message, message
    if damage != "cut":  # cut: the message.completed event went with the rest
        with pytest.raises(HistoryDamageError):
            rt.events(sid)
    rt.close()
    if damage == "shorter":  # a turn whose window holds the reply: the drive stops, the
        # turn is not failed (damaged storage, as a bad record of the stream would be)
        driver = Runtime(data_dir=copy, agent_dir=agent)
        asyncio.run(driver.deliver(sid, "third"))
        with pytest.raises(HistoryDamageError):
            asyncio.run(driver.drive(sid))
        types = [e["type"] for e in driver.events(sid, texts=False)]
        assert types[-1] == "step.started" and "turn.failed" not in types, types[-4:]
        driver.close()
    # The command line says it in one line, no traceback.
    shown = subprocess.run(
        [sys.executable, "-m", "eve_cli", "inspect", sid, "--events", "--data", str(copy)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if damage != "cut":
        assert shown.returncode != 0 and "Traceback" not in shown.stderr, shown.stderr
        assert "history item 3" in shown.stderr, shown.stderr


def test_the_kept_window_reads_no_reply_back_from_events(
    tmp_path: Path, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(script=[reply(f"reply number {i}") for i in range(6)])
    rt = Runtime(data_dir=tmp_path / "data", agent_dir=agent)
    read_back: list[int] = []  # the history items whose events were read from the stream
    original = _replies._read_events

    def counted(world: Any, session_id: str, wanted: Any, events: Any) -> Any:
        for index, item in wanted:
            if set(_replies.event_indexes(item)) - events.keys():
                read_back.append(index)
        return original(world, session_id, wanted, events)

    monkeypatch.setattr(_replies, "_read_events", counted)
    sid = converse(rt, [f"message {i}" for i in range(6)])
    assert read_back == []  # every turn's window took this process's own replies as stored
    rt.close()
    fresh = Runtime(data_dir=tmp_path / "data", load_agent=False)
    texts = [m["content"] for m in fresh.history(sid) if m["role"] == "assistant"]
    assert texts == [f"reply number {i}" for i in range(6)]
    assert read_back == [1, 3, 5, 7, 9, 11]  # a cold reader reads them from the events
    fresh.close()


def test_first_text_is_stored_at_once_and_text_arriving_together_as_one_event(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    # The scripted model's delay: the first character, a pause, then the rest at once.
    agent = make_agent(script=[reply("slow start", delay=0.05), reply("all at once")])
    rt = Runtime(data_dir=tmp_path / "data", agent_dir=agent)
    sid = converse(rt, ["a", "b"])
    deltas = [e["delta"] for e in rt.events(sid) if e["type"] == "message.appended"]
    assert deltas == ["s", "low start", "all at once"]
    texts = [m["content"] for m in rt.history(sid) if m["role"] == "assistant"]
    assert texts == ["slow start", "all at once"]
    stored = [m for m in rt.world.stream_read(f"history.{sid}") if m["role"] == "assistant"]
    assert [m["e"][1] for m in stored] == [2, 1]  # the events of each reply, as one run
    rt.close()
