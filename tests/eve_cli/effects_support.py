"""Helpers of the declared-side-effects tests: tools that log each run and can hang, and one
session of an agent calling one of them."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from eve_cli.execution._view import SessionView
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import call, reply, tool_file, write_agent
from world import World


def effect_tools(log: Path) -> str:
    """Tools that log each run; while `<log>.stall` exists a run logs `stalled` and hangs."""
    return tool_file(f'''
        import asyncio, os
        LOG = {str(log)!r}

        def note(line: str) -> None:
            with open(LOG, "a") as f:
                f.write(line + "\\n")

        async def stall() -> None:
            if os.path.exists(LOG + ".stall"):
                note("stalled")
                print("TOOL-STALL", flush=True)
                await asyncio.sleep(60)

        @tool(effects="unsafe")
        async def charge(amount: int) -> str:
            """Charge a card."""
            note(f"charge {{amount}}")
            await stall()
            return f"charged {{amount}}"

        @tool
        async def store(key: str, ctx: ToolContext) -> str:
            """Store a value (idempotent by ctx.idempotency_key)."""
            note(f"store {{ctx.idempotency_key}}")
            await stall()
            return "stored"

        @tool(effects="none")
        async def look(path: str) -> str:
            """Read something."""
            note(f"look {{path}}")
            await stall()
            return "seen"

        @tool(effects="unsafe")
        async def send(to: str, ctx: ToolContext) -> str:
            """Send an email."""
            if ctx.recorded_progress is not None:
                note(f"resumed {{ctx.resumed}} {{ctx.recorded_progress['id']}}")
                return f"sent as {{ctx.recorded_progress['id']}}"
            note("send")
            ctx.record_progress({{"id": "m-1"}})
            await stall()
            return "sent as m-1"

        @tool(effects="unsafe")
        def send_sync(to: str, ctx: ToolContext) -> str:
            """Send an email, from a tool thread."""
            import time
            if ctx.recorded_progress is not None:
                note(f"resumed {{ctx.resumed}} {{ctx.recorded_progress['id']}}")
                return f"sent as {{ctx.recorded_progress['id']}}"
            note("send")
            ctx.record_progress({{"id": "s-1"}})
            if os.path.exists(LOG + ".stall"):
                note("stalled")
                time.sleep(2)  # the drive is stopped meanwhile; this result goes nowhere
            return "sent as s-1"

        @tool(timeout=1.5)
        async def slow(n: int) -> str:
            """Take long."""
            note("slow")
            await stall()
            await asyncio.sleep(60)
            return "never"

        @tool(timeout=0.3)
        def slow_sync(n: int) -> str:
            """Take long, without a loop."""
            import time
            note("slow_sync")
            time.sleep(3.0)
            return "never"
    ''')


class Case:
    """One session of an agent calling `tool` once, then saying "done"."""

    def __init__(self, root: Path, world: World | str, name: str, **arguments: Any) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.log = root / "effects.log"
        script = [reply("", call(name, **arguments)), reply("done")]
        self.agent = write_agent(
            root / "agent", script=script, tools={"fx": effect_tools(self.log)}
        )
        if isinstance(world, str):  # a data directory or URL other processes open too
            self.rt = Runtime(data_dir=world, agent_dir=self.agent)
        else:
            self.rt = Runtime(agent_dir=self.agent, world=world)
        self.sid = asyncio.run(self.rt.create_session())

    def stall(self) -> None:
        Path(f"{self.log}.stall").write_text("")

    def runs(self) -> Counter[str]:
        return Counter(self.log.read_text().splitlines()) if self.log.exists() else Counter()

    def interrupted(self, after: float = 0.0) -> None:
        """Deliver the message and stop the drive while the tool hangs (as a crash would)."""

        async def main() -> None:
            await self.rt.deliver(self.sid, "go")
            drive = asyncio.ensure_future(self.rt.drive(self.sid))
            while "stalled" not in self.runs():
                assert not drive.done(), drive.result()
                await asyncio.sleep(0.01)
            Path(f"{self.log}.stall").unlink(missing_ok=True)
            await asyncio.sleep(after)
            drive.cancel()
            with pytest.raises(asyncio.CancelledError):
                await drive

        asyncio.run(main())

    def drive(self) -> SessionView:
        return asyncio.run(self.rt.drive(self.sid))

    def tool_message(self) -> dict[str, Any]:
        [message] = [m for m in self.rt.history(self.sid) if m["role"] == "tool"]
        return message


def parked_case(root: Path, world: World | str, **arguments: Any) -> Case:
    """A session whose `charge` call was interrupted: parked on its outcome."""
    case = Case(root, world, "charge", **arguments)
    case.stall()
    case.interrupted()
    view = case.drive()
    assert view["parkedOn"] == "outcome", view
    return case
