"""The facade's contract (docs/RUNTIME.md): on every world, and on the default LocalWorld."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from eve_cli._loader import AgentLoadError
from eve_cli.execution._view import SessionView
from eve_cli.runtime import InvalidSessionIdError, Runtime, SessionNotFoundError
from tests.eve_cli.rt_support import DANGER_TOOL, AgentFactory, call, first_args, reply, tool_file
from tests.worlds import WorldOpener

NOTE = tool_file(
    """
    @tool
    def note(x: int) -> int:
        \"\"\"Echo.\"\"\"
        return x
    """
)


def test_the_default_world_is_local_under_the_data_directory(isolated: Path) -> None:
    rt = Runtime()
    assert rt.data_dir == isolated / ".workflow-data"
    asyncio.run(rt.create_session())
    assert (rt.data_dir / "FORMAT").exists()
    rt.close()


def test_a_listing_builds_its_rows_with_the_collector_paused(
    make_agent: AgentFactory, open_world: WorldOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    rt = Runtime(agent_dir=make_agent(script=[reply("hi")]), world=open_world())
    sid = asyncio.run(rt.create_session())
    collecting: list[bool] = []
    real = rt.world.stream_versions

    def stream_versions(names: Any) -> Any:
        collecting.append(gc.isenabled())
        return real(names)

    monkeypatch.setattr(rt.world, "stream_versions", stream_versions)
    assert [r["id"] for r in rt.sessions()] == [sid]
    assert collecting == [False] and gc.isenabled()
    rt.close()


def test_sessions_list_status_counts_and_size(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(script=[reply("hi"), reply("", call("ask_question", question="?"))])

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        idle = await rt.create_session()
        assert [r["id"] for r in rt.sessions()] == [idle]  # listed from creation on
        assert (await rt.deliver(idle, "hello")).disposition == "started"
        await rt.drive(idle)
        busy = await rt.create_session()
        await rt.deliver(busy, "ask")  # the script's entry 0 ("hi") is per session
        await rt.drive(busy)
        await rt.deliver(busy, "ask")
        await rt.drive(busy)
        rows = {r["id"]: r for r in rt.sessions()}
        assert list(rows) == [busy, idle]  # most recent first
        assert {r["agent"] for r in rows.values()} == {agent.name}
        assert (rows[idle]["status"], rows[idle]["turns"], rows[idle]["steps"]) == ("waiting", 1, 1)
        assert (rows[busy]["status"], rows[busy]["parkedOn"], rows[busy]["turns"]) == (
            "parked",
            "question",
            2,
        )
        assert rows[busy]["steps"] == 2
        assert all((r["bytes"] or 0) > 0 for r in rows.values())
        view = rt.session(busy)
        assert view["pending"][0]["question"] == "?" and view["agent"] == agent.name
        # Another opener lists the same rows from the heads' notes.
        again = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
        assert again.sessions() == list(rows.values())

    asyncio.run(main())


def test_ids_unknown_and_malformed(open_world: WorldOpener) -> None:
    async def main() -> None:
        rt = Runtime(world=open_world())
        with pytest.raises(SessionNotFoundError):
            rt.session("s_000000000000000000000000")
        with pytest.raises(InvalidSessionIdError):
            await rt.deliver("../etc", "x")
        with pytest.raises(ValueError, match="unknown model"):
            Runtime(model="gpt-4")

    asyncio.run(main())


def test_operation_id_makes_create_idempotent(open_world: WorldOpener) -> None:
    async def main() -> None:
        rt = Runtime(world=open_world())
        first = await rt.create_session(operation_id="op-1")
        assert await rt.create_session(operation_id="op-1") == first
        assert await rt.create_session(operation_id="op-2") != first

    asyncio.run(main())


def test_demo_agent_works_out_of_the_box(open_world: WorldOpener) -> None:
    async def main() -> None:
        rt = Runtime(world=open_world())
        sid = await rt.create_session()
        await rt.deliver(sid, "what time is it?")
        view = await rt.drive(sid)
        [action] = view["turns"][0]["steps"][0]["actions"]
        assert action["name"] == "get_current_time" and action["status"] == "completed"
        assert view["turns"][0]["steps"][1]["text"].startswith("It is ")
        await rt.deliver(sid, "remember to water the plants")
        view = await rt.drive(sid)
        assert (view["status"], view["parkedOn"]) == ("parked", "approval")
        await rt.respond(sid, [{"requestId": view["pending"][0]["requestId"], "approved": True}])
        view = await rt.drive(sid)
        assert "saved note 1: water the plants" in view["turns"][1]["steps"][1]["text"]

    asyncio.run(main())


def test_broken_edit_keeps_last_good_definition(make_agent: AgentFactory) -> None:
    agent = make_agent(script=[reply("one"), reply("two")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        (agent / "agent.py").write_text("agent = define_agent(\n")
        with pytest.raises(AgentLoadError, match=r"agent\.py:1: syntax error"):
            rt.reload_agent()
        await rt.deliver(sid, "hi")
        view = await rt.drive(sid)
        assert view["turns"][0]["status"] == "completed"
        assert rt.agent_error() is not None and "agent.py:1" in (rt.agent_error() or "")

    asyncio.run(main())


def test_wait_wakes_on_a_delivery_from_another_runtime(open_world: WorldOpener) -> None:
    async def main() -> None:
        rt = Runtime(world=open_world())
        sid = await rt.create_session()
        await rt.drive(sid)
        assert await rt.wait(sid, 0.05) is False
        other = Runtime(world=open_world())  # another opener of the same world
        waiting = asyncio.create_task(rt.wait(sid, 10))
        await asyncio.sleep(0.05)
        await other.deliver(sid, "hello")
        assert await waiting is True
        view = await rt.drive(sid)
        assert view["turns"][0]["status"] == "completed"

    asyncio.run(main())


def test_session_view_read_again_matches_a_fresh_fold_and_reports_damage(
    make_agent: AgentFactory, isolated: Path
) -> None:
    from eve_cli.execution._view import fold
    from world import CorruptJournalError

    agent = make_agent(
        script=[reply("", call("ask_question", question="?")), reply("one"), reply("two")]
    )

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        await rt.deliver(sid, "ask")
        first = await rt.drive(sid)  # folded and kept
        assert first["status"] == "parked"
        first["turns"].clear()  # a caller's copy: changing it changes nothing kept
        [request] = rt.session(sid)["pending"]
        await rt.respond(sid, [{"requestId": request["requestId"], "answer": "blue"}])
        view = await rt.drive(sid)  # fed only the events appended since
        fresh = fold(sid, rt.events(sid))
        assert view["status"] == "waiting" and view["turns"] == fresh["turns"]
        assert view["events"] == fresh["events"] == len(rt.events(sid))
        await rt.deliver(sid, "again")
        view = await rt.drive(sid)  # the first turn is now kept frozen, shared read-only
        with pytest.raises(TypeError, match="read-only"):
            view["turns"][0]["steps"].clear()
        with pytest.raises(TypeError, match="read-only"):
            view["turns"][0]["status"] = "changed"
        mine = copy.deepcopy(view)  # a caller that wants to change it copies it
        mine["turns"][0]["steps"].clear()
        view["turns"][-1]["id"] = "mine"  # the last turn is the caller's own copy
        assert json.loads(json.dumps(rt.session(sid))) == rt.session(sid)
        assert rt.session(sid)["turns"] == fold(sid, rt.events(sid))["turns"]
        assert [t["status"] for t in view["turns"]] == ["completed", "completed"]
        assert view["turns"][-1]["id"] == "mine" != rt.session(sid)["turns"][-1]["id"]
        data = isolated / ".workflow-data" / "streams" / f"events.{sid}.msgpack"
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 3 : len(raw) // 3 + 16] = b"\xc1" * 16  # garbage in a folded event
        data.write_bytes(bytes(raw))
        with pytest.raises(CorruptJournalError):
            rt.session(sid)

    asyncio.run(main())


def test_a_view_fed_as_events_are_written_equals_one_read_back(
    make_agent: AgentFactory, isolated: Path
) -> None:
    """The writer's kept view takes each event as it is written; after every kind of turn
    it is what a fresh fold of the stored events gives (and another process's view), and
    what a tool does to values it returned later changes nothing in it."""
    from eve_cli.execution._view import fold

    keep = tool_file(
        """
        from typing import Any

        KEPT = []

        @tool
        def keep(items: Any, tag: Any) -> dict:
            \"\"\"Returns what it got, and changes what it returned before.\"\"\"
            for old in KEPT:
                old["items"].append(-1)
                old["tag"]["changed"] = 1
            KEPT.append({"items": items, "tag": tag, "when": (1, 2)})
            return KEPT[-1]

        @tool
        def broken() -> str:
            \"\"\"Fails.\"\"\"
            raise ValueError("no")
        """
    )
    agent = make_agent(
        script=[
            reply("hello there"),
            reply("", call("keep", items=[1, 2], tag={"a": 1}), call("broken")),
            reply("", call("keep", items=[3], tag={"b": 2})),
            reply("kept"),
            reply("", call("danger", x=1)),
            reply("", call("ask_question", question="colour?")),
            reply("", call("researcher", task="find x")),
            reply("all done"),
            reply("after the summary"),
        ],
        tools={"keep": keep, "danger": DANGER_TOOL},
        subagents={"researcher": {"script": [reply("x is 42")], "instructions": "Research."}},
    )

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        views = [await rt.drive(sid)]

        async def check() -> SessionView:
            view = rt.session(sid)
            other = Runtime(agent_dir=agent, load_agent=False)
            try:
                other_status = other.reader.status(sid)  # before its view: nothing kept yet
                assert view == other.session(sid)
            finally:
                other.close()
            fresh = fold(sid, rt.events(sid))
            # A delivery's status check answers from the kept fold; a reader's from the tail.
            assert rt.reader.status(sid) == other_status == view["status"]
            # So does the listing row the head keeps (sessions() of another process reads it).
            [row] = [r for r in rt.sessions() if r["id"] == sid]
            del row["bytes"]  # the note's: counted before the head and the inbox are rewritten
            note = rt.worker.head_note(sid)
            assert note is not None and note["row"] == row
            assert {k: v for k, v in (rt.reader.row(sid) or {}).items() if k != "bytes"} == row
            assert {
                k: v for k, v in view.items() if k in fresh and k not in ("agent", "mode", "model")
            } == {k: v for k, v in fresh.items() if k not in ("agent", "mode", "model")}
            views.append(view)
            return view

        await rt.deliver(sid, "hi")
        await rt.drive(sid)
        assert (await check())["turns"][-1]["steps"][0]["text"] == "hello there"
        await rt.deliver(sid, "keep")
        await rt.drive(sid)
        view = await check()
        first, _, second = [a for s in view["turns"][-1]["steps"] for a in s["actions"]][:3]
        # The second call changed what the first got and returned; the view kept them as sent.
        assert first["arguments"] == {"items": [1, 2], "tag": {"a": 1}}
        assert json.loads(first["output"]) == {"items": [1, 2], "tag": {"a": 1}, "when": [1, 2]}
        assert second["arguments"] == {"items": [3], "tag": {"b": 2}}
        await rt.deliver(sid, "danger")
        view = await rt.drive(sid)
        assert view["parkedOn"] == "approval" and view == await check()
        [req] = view["pending"]
        await rt.respond(sid, [{"requestId": req["requestId"], "approved": True}])
        view = await rt.drive(sid)
        assert view["parkedOn"] == "question" and view == await check()
        [req] = view["pending"]
        await rt.respond(sid, [{"requestId": req["requestId"], "answer": "blue"}])
        view = await rt.drive(sid)
        assert view["status"] == "waiting" and view == await check()
        await rt.compact(sid)
        await rt.drive(sid)
        await rt.deliver(sid, "more")
        await rt.drive(sid)
        view = await check()
        assert view["compactions"] == 1
        assert view["turns"][-1]["steps"][-1]["text"] == "after the summary"
        rt.close()

    asyncio.run(main())


def test_a_turn_estimates_only_the_messages_appended_since_the_last(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eve_cli.execution import _host

    estimated = first_args(monkeypatch, _host, "message_tokens")
    turns = 12
    agent = make_agent(script=[reply(f"answer {i}") for i in range(turns)])

    async def main() -> tuple[int, list[str]]:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        for i in range(turns):
            await rt.deliver(sid, f"message {i}")
            await rt.drive(sid)
        during_turns = len(estimated)
        return during_turns, [m["content"] for m in rt.history(sid)]

    during_turns, history = asyncio.run(main())
    assert len(history) == 2 * turns
    # The window kept between turns is extended, not estimated whole again at every turn
    # (that would be about turns * turns estimates).
    assert during_turns <= 2 * len(history), during_turns


def test_history_window_kept_between_turns_is_checked_against_the_stream(
    make_agent: AgentFactory, isolated: Path
) -> None:
    from eve_cli._session import history_stream
    from eve_cli.execution._replies import resolve
    from eve_cli.execution._streams import strip_key
    from world import CorruptJournalError

    agent = make_agent(script=[reply("one"), reply("two"), reply("three")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        for text in ("a", "b"):
            await rt.deliver(sid, text)
            await rt.drive(sid)
        raw_items = [strip_key(m) for m in rt.world.stream_read(history_stream(sid))]
        stored = resolve(rt.world, sid, 0, raw_items)  # replies refer to their delta events
        assert [m["content"] for m in stored] == ["a", "one", "b", "two"]
        window = rt.executor.history_window
        assert window(sid, 0, 4) == stored and window(sid, 0, 2) == stored[:2]
        assert window(sid, 1, 4) == stored[1:]
        data = isolated / ".workflow-data" / "streams" / f"history.{sid}.msgpack"
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2 : len(raw) // 2 + 16] = b"\xc1" * 16  # garbage in a kept message
        data.write_bytes(bytes(raw))
        with pytest.raises(CorruptJournalError):
            window(sid, 1, 4)

    asyncio.run(main())


def _reads(rt: Runtime) -> list[tuple[str, int, int | None]]:
    """The stream reads `rt`'s world makes from now on: (name, start, end), as they are made."""
    read: list[tuple[str, int, int | None]] = []
    real = rt.world.stream_read

    def counted(name: str, start: int = 0, end: int | None = None) -> list[Any]:
        read.append((name, start, end))
        return real(name, start, end)

    rt.world.stream_read = counted  # type: ignore[method-assign]
    return read


def test_a_window_whose_start_moved_on_takes_the_kept_items_from_there(
    make_agent: AgentFactory, isolated: Path
) -> None:
    """A compaction moves the window's start: the items kept from before are taken from the
    new start (their stream prefix checked unchanged), none read again, nor their texts."""
    from eve_cli._session import history_stream

    agent = make_agent(script=[reply("one"), reply("two"), reply("three")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        for text in ("a", "b", "c"):
            await rt.deliver(sid, text)
            await rt.drive(sid)
        window = rt.executor.history_window
        whole = window(sid, 0, 6)
        assert [m["content"] for m in whole] == ["a", "one", "b", "two", "c", "three"]
        read = _reads(rt)
        assert window(sid, 2, 6) == whole[2:]
        assert window(sid, 4, 6) == whole[4:]
        assert read == []  # (a stream's digest is not a read of its items)
        assert window(sid, 0, 6) == whole  # (an earlier start than kept: read again)
        assert (history_stream(sid), 0) in [(name, start) for name, start, _ in read]

    asyncio.run(main())


def test_a_turns_window_reads_back_none_of_what_the_last_turn_stored(
    make_agent: AgentFactory, isolated: Path
) -> None:
    """What a turn stores in history (its message, replies, tool results) the kept window
    takes as written: the next turn reads none of it back, and its window is what a read
    gives (same fields, same order)."""
    from eve_cli._session import history_stream
    from eve_cli.execution._replies import resolve
    from eve_cli.execution._streams import strip_key

    agent = make_agent(
        script=[{"text": "", "tool_calls": [call("note", x=1)]}, reply("one"), reply("two")],
        tools={"note": NOTE},
    )

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        await rt.deliver(sid, "a")
        await rt.drive(sid)
        await rt.deliver(sid, "b")
        read = _reads(rt)
        await rt.drive(sid)
        # (the turn reads its own message ahead: item 4)
        assert [r for r in read if r[0] == history_stream(sid)] == [(history_stream(sid), 4, None)]
        window = rt.executor.history_window(sid, 0, 6)
        stored = [strip_key(m) for m in rt.world.stream_read(history_stream(sid))]
        expected = resolve(rt.world, sid, 0, stored)
        assert [m["content"] for m in expected] == ["a", "", "1", "one", "b", "two"]
        assert window == expected and [list(m) for m in window] == [list(m) for m in expected]

    asyncio.run(main())


def test_a_kept_window_takes_what_was_written_only_as_stored() -> None:
    """Items a process wrote are kept as written while the stream holds as many: one not
    stored (a write that failed) is not taken, one written again at its index replaces it,
    and a failed drive forgets them all (`Worker.drive`)."""
    from eve_cli.execution import Executor
    from world import MemoryWorld

    world = MemoryWorld()
    executor = Executor(world)
    name, a = "history.s1", {"role": "user", "content": "a"}
    world.stream_append(name, a)
    assert executor.history_window("s1", 0, 1) == [a]
    lost = {"role": "assistant", "content": "lost", "tool_calls": []}
    assert executor.wrote_history("s1", 1, lost)  # never stored
    again = {"role": "assistant", "content": "again", "tool_calls": []}
    assert executor.wrote_history("s1", 1, again)  # written again there: replaces it
    world.stream_append(name, again)
    assert executor.history_window("s1", 0, 2) == [a, again]
    assert executor.wrote_history("s1", 2, lost)  # never stored: not taken
    assert executor.history_window("s1", 0, 3) == [a, again]
    assert executor.wrote_history("s1", 2, lost)
    executor.forget("s1")  # a failed drive: another process may write there next
    world.stream_append(name, {"role": "user", "content": "b"})
    assert executor.history_window("s1", 0, 3) == [a, again, {"role": "user", "content": "b"}]
    assert not executor.wrote_history("s1", 0, lost)  # where it read: not kept at all
    assert executor.history_window("s1", 0, 3)[0] == a


def test_a_failed_drive_forgets_the_history_its_turns_wrote(
    make_agent: AgentFactory, isolated: Path
) -> None:
    agent = make_agent(script=[reply("one")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        await rt.deliver(sid, "a")
        await rt.drive(sid)
        assert sid in rt.executor._windows

        async def failing(*args: Any, **kwargs: Any) -> None:
            raise OSError("disk")

        rt.core.engine.run = failing  # type: ignore[method-assign, assignment]
        with pytest.raises(OSError):
            await rt.drive(sid)
        assert sid not in rt.executor._windows

    asyncio.run(main())


def test_a_row_reads_the_text_of_the_first_message_alone(
    make_agent: AgentFactory, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing row's first message: the first events (a few, then more if it is not among
    them), and that message's history item (the replies among those events keep their
    texts unread: a row shows none)."""
    from eve_cli._session import events_stream, history_stream

    agent = make_agent(script=[reply("one " * 50), reply("two " * 50)])

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        for text in ("the first message", "b"):
            await rt.deliver(sid, text)
            await rt.drive(sid)
        read = _reads(rt)
        assert rt.reader._first_message(sid) == "the first message"
        assert read == [(events_stream(sid), 0, 4), (history_stream(sid), 0, 1)]
        assert rt.sessions()[0]["first"] == "the first message"
        read.clear()  # not among the first events looked at: the first 16 are read
        monkeypatch.setattr("eve_cli.runtime._reader._FIRST_LOOK", 2)
        assert rt.reader._first_message(sid) == "the first message"
        assert read[:2] == [(events_stream(sid), 0, 2), (events_stream(sid), 0, 16)]

    asyncio.run(main())


def test_a_meta_forgotten_while_it_is_checked_is_no_error(
    make_agent: AgentFactory, isolated: Path
) -> None:
    """A session's kept meta is checked against the world (a round trip on PostgreSQL) while
    another thread may forget it (a create made again, a removal): the check still answers."""
    agent = make_agent(script=[reply("one")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session()
        meta = rt.core.meta(sid)  # kept now
        real = rt.world.heads

        def heads(*args: Any, **kwargs: Any) -> Any:
            rt.core.forget_meta(sid)  # as another thread would, during the round trip
            return real(*args, **kwargs)

        rt.world.heads = heads  # type: ignore[method-assign]
        assert rt.core.meta(sid) == meta
        rt.world.heads = real  # type: ignore[method-assign]
        assert rt.core.meta(sid) == meta  # (looked up again, kept again)

    asyncio.run(main())


def test_a_session_made_again_after_gc_is_not_read_from_what_was_kept(
    make_agent: AgentFactory, isolated: Path
) -> None:
    import time

    from eve_cli._retention import FINISHED, collect, collecting_runtime

    agent = make_agent(script=[reply(f"answer {i}") for i in range(3)])

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        sid = await rt.create_session(operation_id="op-1")
        await rt.deliver(sid, "first")
        assert (await rt.drive(sid))["status"] == "waiting"
        assert rt.session(sid)["model"] != "demo"  # its meta is kept now
        data = isolated / ".workflow-data"
        reader = collecting_runtime(data)
        try:
            removed = collect(reader, time.time() + 60, {*FINISHED, "waiting"}, dry_run=False)
        finally:
            reader.close()
        assert [e.id for e in removed if e.action == "removed"] == [sid]
        again = await rt.create_session(model="demo", operation_id="op-1")
        assert again == sid and rt.session(sid)["model"] == "demo"
        await rt.deliver(sid, "second")
        view = await rt.drive(sid)
        assert [t["input"] for t in view["turns"]] == ["second"]
        history = rt.history(sid)
        assert len(history) == 2 and history[0]["content"] == "second"
        rt.close()

    asyncio.run(main())
