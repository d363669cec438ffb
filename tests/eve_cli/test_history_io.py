"""A turn's history reads on a network world are made off the event loop: a real
PostgresWorld, whose every stream read is a round trip, is never read from the loop's thread
while sessions are driven (the window at a turn's start, compactions, the model's view)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import DANGER_TOOL, AgentFactory, call, reply, tool_file
from tests.pg_support import fresh_schema
from world import MemoryWorld, _offload

SMALL = "context_window=300, compaction=Compaction(threshold_percent=0.9, reserved_tokens=0)"
LONG = "x" * 400  # about 100 tokens: the third turn's model call compacts
NOTE = tool_file(
    """
    @tool
    def note(x: int) -> int:
        \"\"\"Echo.\"\"\"
        return x
    """
)
TOOLS = {"note": NOTE, "danger": DANGER_TOOL}


def _recording(base: type[Any]) -> type[Any]:
    class Recording(base):  # type: ignore[misc]
        """Records the thread of every stream read while `reads` is a list (a read the engine
        made inline on the loop, where `_offload.Placement` puts a quick store's calls for
        one family: "MainThread (inline)")."""

        reads: list[str] | None = None

        def _seen(self) -> None:
            if self.reads is not None:
                inline = " (inline)" if _offload.inline() else ""
                self.reads.append(threading.current_thread().name + inline)

        def stream_read(self, name: str, start: int = 0, end: int | None = None) -> Any:
            self._seen()
            return super().stream_read(name, start, end)

        def stream_digest(self, name: str, count: int, after: Any = None) -> Any:
            self._seen()
            return super().stream_digest(name, count, after)

    return Recording


async def _converse(rt: Runtime, sids: list[str], turns: int) -> None:
    """``turns`` turns of tool steps (the third compacts by size) in each session at once."""
    for i in range(turns):
        for sid in sids:
            await rt.deliver(sid, f"message {i} {LONG}")
        views = await asyncio.gather(*(rt.drive(sid) for sid in sids))
        assert [v["status"] for v in views] == ["waiting", "waiting"]


async def _approve(rt: Runtime, sids: list[str]) -> None:
    """A turn that parks on an approval, replayed when it is answered; then a compaction
    asked between turns."""
    for sid in sids:
        await rt.deliver(sid, "danger")
    await asyncio.gather(*(rt.drive(sid) for sid in sids))
    for sid in sids:
        [pending] = (await rt.call(rt.session, sid))["pending"]
        await rt.respond(sid, [{"requestId": pending["requestId"], "approved": True}])
    await asyncio.gather(*(rt.drive(sid) for sid in sids))
    for sid in sids:
        await rt.compact(sid)
    views = await asyncio.gather(*(rt.drive(sid) for sid in sids))
    assert [v["turns"][-1]["status"] for v in views] == ["completed", "completed"]
    for sid in sids:
        events = await rt.call(rt.events, sid)
        done = [e for e in events if e["type"] == "compaction.completed"]
        assert len(done) >= 2 and all(e["status"] == "completed" for e in done)


def _script() -> list[dict[str, Any]]:
    turn = [{"text": "", "tool_calls": [call("note", x=1)]}, reply("done")]
    return turn * 4 + [{"text": "", "tool_calls": [call("danger", x=2)]}, reply("after")]


def _run(world: Any, later: Any, agent: Path) -> list[str]:
    """Two sessions: three turns, then in a new runtime on a new world object (another
    process) a turn, an approved one and a compaction; the threads of the reads meanwhile."""

    async def first() -> list[str]:
        rt = Runtime(agent_dir=agent, world=world)
        world.reads = []
        sids = [await rt.create_session() for _ in range(2)]
        await _converse(rt, sids, 3)
        return sids

    async def then(sids: list[str]) -> None:
        rt = Runtime(agent_dir=agent, world=later)
        later.reads = world.reads
        await _converse(rt, sids, 1)
        await _approve(rt, sids)

    asyncio.run(then(asyncio.run(first())))
    return list(world.reads)


def test_a_turns_history_reads_on_postgres_are_made_where_the_engine_says(
    make_agent: AgentFactory,
) -> None:
    from world import PostgresWorld

    agent = make_agent(script=_script(), agent_args=SMALL, tools=TOOLS)
    with fresh_schema() as url:
        world, later = _recording(PostgresWorld)(url), _recording(PostgresWorld)(url)
        try:
            reads = _run(world, later, agent)
        finally:
            world.close()
            later.close()
    # Keys, each turn's first message, windows, compactions: read on threads, or inline where
    # the engine puts a quick round trip; none made on the loop behind the engine's back.
    assert len(reads) >= 40 and "MainThread" not in reads, reads


def test_a_memory_worlds_history_is_read_inline(make_agent: AgentFactory) -> None:
    agent = make_agent(script=_script(), agent_args=SMALL, tools=TOOLS)
    world = _recording(MemoryWorld)()
    reads = _run(world, world, agent)
    assert reads and set(reads) == {"MainThread"}  # nothing to wait for: no thread hop
