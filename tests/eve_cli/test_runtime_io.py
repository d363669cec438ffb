"""On a network world (`World.io` is NETWORK) the facade's calls from an event loop run off
it: the HTTP channel's reads and a drive's storage calls leave the loop free."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, reply
from world import IO, MemoryWorld


class NetworkWorld(MemoryWorld):
    """A memory world that says its calls are round trips, and records where heads are read
    and streams are listed (what a listing and a view do)."""

    io = IO.NETWORK

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def heads(self, *, inbox: bool = True, runnable: bool = False) -> Any:
        self.threads.append(threading.current_thread().name)
        return super().heads(inbox=inbox, runnable=runnable)

    def stream_read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        self.threads.append(threading.current_thread().name)
        return super().stream_read(name, start, end)


def test_reads_and_drives_on_a_network_world_run_off_the_loop(make_agent: AgentFactory) -> None:
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
