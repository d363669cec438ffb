"""A stream item a repair replaced is read around (issue 22): readers show the rest and one
`event.lost` where it was; the session goes on when the lost item is an event, or a history
item before its window; it stops with one line saying so when its model context needs the
item — and `eve inspect`'s check says the same."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eve_cli._events import Event
from eve_cli._losses import context_damage, losses
from eve_cli.execution._lost import ContextLostError
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, reply
from world import LocalWorld, _journal

SCRIPT = [reply("first answer"), reply("second answer"), reply("third answer")]


def _session(data: Path, agent: Path, messages: list[str]) -> str:
    async def go() -> str:
        rt = Runtime(data_dir=data, agent_dir=agent)
        try:
            sid = await rt.create_session()
            for text in messages:
                await rt.deliver(sid, text)
                await rt.drive(sid)
            return sid
        finally:
            rt.close()

    return asyncio.run(go())


def _damage_item(path: Path, index: int) -> None:
    """Flip bytes inside item ``index`` of a stream file, then repair the store."""
    data = bytearray(path.read_bytes())
    records = [pos for pos, _ in _journal.read_file(str(path)).records][1:]  # after the header
    start, end = records[index], [*records[1:], len(data)][index]
    for k in range(start + 6, min(end - 2, start + 14)):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))
    world = LocalWorld(path.parent.parent)
    try:
        assert any(f.state == "repaired" for f in world.verify(repair=True))
    finally:
        world.close()


def lost_event_session(data: Path, agent: Path) -> tuple[str, list[Event], int]:
    """A session of two turns whose first reply event a repair replaced: its id, its events
    as they were, the lost one's index."""
    sid = _session(data, agent, ["one", "two"])
    rt = Runtime(data_dir=data, agent_dir=agent)
    before = rt.events(sid)
    rt.close()
    lost = next(e["index"] for e in before if e["type"] == "message.completed")
    _damage_item(data / "streams" / f"events.{sid}.msgpack", lost)
    return sid, before, lost


def test_a_lost_event_is_shown_where_it_was_and_the_session_goes_on(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    agent = make_agent(script=SCRIPT)
    data = tmp_path / "data"
    sid, before, lost = lost_event_session(data, agent)
    rt = Runtime(data_dir=data, agent_dir=agent)
    try:
        after = rt.events(sid)
        assert [e for e in after if e["type"] == "event.lost"] == [after[lost]]
        assert after[lost]["index"] == lost and "lost in a repair" in after[lost]["error"]
        assert [e for e in after if e["index"] != lost] == [e for e in before if e["index"] != lost]
        assert context_damage(rt, sid) is None
        [loss] = losses(rt, sid)
        assert (loss.turn, loss.message) == (1, "one"), loss
        asyncio.run(rt.deliver(sid, "three"))
        view = asyncio.run(rt.drive(sid))
        assert [t["input"] for t in view["turns"]] == ["one", "two", "three"]
        assert view["turns"][-1]["steps"][-1]["text"] == "third answer"
        again = rt.events(sid)
        assert again[: len(after)] == after  # nothing earlier changed or was added again
    finally:
        rt.close()


@pytest.mark.parametrize("cleared", [False, True])
def test_a_lost_history_item_stops_the_session_only_if_its_context_needs_it(
    tmp_path: Path, make_agent: AgentFactory, cleared: bool
) -> None:
    agent = make_agent(script=SCRIPT)
    data = tmp_path / "data"
    sid = _session(data, agent, ["one", "two"])
    if cleared:  # the window starts after what is lost
        rt = Runtime(data_dir=data, agent_dir=agent)
        asyncio.run(rt.clear(sid))
        asyncio.run(rt.drive(sid))
        rt.close()
    _damage_item(data / "streams" / f"history.{sid}.msgpack", 1)  # the first reply

    rt = Runtime(data_dir=data, agent_dir=agent)
    try:
        events = rt.events(sid)  # every event read; the lost reply's text said to be lost
        replies = [e["text"] for e in events if e["type"] == "message.completed"]
        assert replies[0].startswith("[lost in a repair") and replies[1] == "second answer"
        [loss] = losses(rt, sid)
        assert (loss.turn, loss.message, loss.what) == (1, "one", "the reply (history item 1)")
        asyncio.run(rt.deliver(sid, "three"))
        if cleared:
            view = asyncio.run(rt.drive(sid))
            assert view["turns"][-1]["steps"][-1]["text"] == "third answer"
            assert context_damage(rt, sid) is None
            return
        with pytest.raises(ContextLostError) as raised:
            asyncio.run(rt.drive(sid))
        line = str(raised.value)
        assert f"history item 1 of session {sid}" in line and "cannot go on" in line
        assert not raised.value.repairable  # not "run eve doctor --repair" again
        damage = context_damage(rt, sid)
        assert damage is not None and str(damage) == line  # what `eve inspect` says
    finally:
        rt.close()


def test_a_fork_before_a_repaired_gap_goes_on_and_one_after_it_is_one_line(
    make_agent: AgentFactory, tmp_path: Path
) -> None:
    """The journal record of step 1.1 (the model call after a tool) repaired to a gap: the
    session's checkpoints before it still fork, and the fork runs step 1.1 again live; a fork
    after the gap is refused in one line naming it."""
    from eve_cli.testing import call, chat
    from tests.eve_cli.rt_support import tool_file

    echo = tool_file(
        '''
        @tool
        def echo(text: str) -> str:
            """Echo."""
            return text
        '''
    )
    script = [reply("", call("echo", text="x")), reply("one"), reply("two")]
    agent = make_agent(script=script, tools={"echo": echo})
    data = tmp_path / "data"
    sid = _session(data, agent, ["first", "second"])
    journal = data / "runs" / sid / "journal.msgpack"
    read = _journal.read_file(str(journal)).records
    [step] = [i for i, (_, rec) in enumerate(read) if rec.get("name") == "model:1"]
    raw = bytearray(journal.read_bytes())
    start, end = read[step][0], read[step + 1][0]
    for k in range(start + 6, min(end - 2, start + 14)):
        raw[k] ^= 0x5A
    journal.write_bytes(bytes(raw))
    world = LocalWorld(data)
    try:
        assert any(f.state == "repaired" for f in world.verify(repair=True))
    finally:
        world.close()

    async def go() -> None:
        rt = Runtime(data_dir=data, agent_dir=agent)
        try:
            fork = await rt.fork(sid, "1.0")
            assert fork["checkpoint"] == "1.0"
            view = await chat(rt, fork["sessionId"], "more")
            assert view["status"] == "waiting", view
            # Step 1.1 ran again, live (the model's call 1 again), the message steering it.
            [turn] = view["turns"]
            assert turn["status"] == "completed"
            assert [s["text"] for s in turn["steps"]] == ["", "one"]
            with pytest.raises(Exception, match="offset") as refused:
                await rt.fork(sid, "1.1")
            assert "\n" not in str(refused.value)
        finally:
            rt.close()

    asyncio.run(go())
