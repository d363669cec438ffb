"""On a network world (`World.io` is NETWORK) the facade's calls from an event loop are made
where the engine says (`_offload.Placement`): off it, or inline for a quick store while one
session is driven; never on the loop behind the engine's back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from eve_cli._events import Event
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, reply
from world import MemoryWorld, _offload
from world._store import IO


class NetworkWorld(MemoryWorld):
    """A memory world that says its calls are round trips, and records where heads are read
    and streams are listed (what a listing and a view do)."""

    io = IO.NETWORK

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []  # "MainThread (inline)": made inline by the engine
        self.recorded: str | None = None  # the one stream whose reads are recorded (None: all)

    def heads(
        self, *, roots: Sequence[str] | None = None, inbox: bool = True, runnable: bool = False
    ) -> Any:
        self._seen()
        return super().heads(roots=roots, inbox=inbox, runnable=runnable)

    def stream_read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        if self.recorded in (None, name):
            self._seen()
        return super().stream_read(name, start, end)

    def _seen(self) -> None:
        inline = " (inline)" if _offload.inline() else ""
        self.threads.append(threading.current_thread().name + inline)


def test_reads_and_drives_on_a_network_world_are_made_where_the_engine_says(
    make_agent: AgentFactory,
) -> None:
    agent = make_agent(script=[reply("hello")])
    world = NetworkWorld()

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=world)
        sid = await rt.create_session()
        await rt.deliver(sid, "hi")
        view = await rt.drive(sid)
        assert view["turns"][0]["status"] == "completed"
        world.threads.clear()
        rows = await rt.call(rt.sessions)
        view = await rt.call(rt.session, sid)
        assert [r["id"] for r in rows] == [sid] and view["status"] == "waiting"
        assert world.threads and "MainThread" not in world.threads

    asyncio.run(main())
    # Inline on a memory world: nothing to wait for.
    rt = Runtime(agent_dir=agent, world=MemoryWorld())
    assert asyncio.run(rt.call(threading.current_thread)) is threading.current_thread()


def test_a_tails_message_texts_on_a_network_world_are_read_where_the_engine_says(
    make_agent: AgentFactory,
) -> None:
    agent = make_agent(script=[reply("hello there")])
    world = NetworkWorld()

    async def main() -> list[Event]:
        rt = Runtime(agent_dir=agent, world=world)
        sid = await rt.create_session()
        await rt.deliver(sid, "hi")
        await rt.drive(sid)
        world.threads.clear()
        world.recorded = f"history.{sid}"  # the texts the events refer to
        seen: list[Event] = []
        async for event in rt.tail(sid):
            seen.append(event)
            if event["type"] == "session.waiting" and len(seen) > 2:
                return seen
        return seen

    seen = asyncio.run(main())
    texts = [e.get("text") for e in seen if e["type"] in ("message.received", "message.completed")]
    assert texts == ["hi", "hello there"]
    assert world.threads and "MainThread" not in world.threads
