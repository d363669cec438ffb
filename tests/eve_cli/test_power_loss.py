"""Power cuts at every sync of real workloads (tests/power_cut.py builds the crash states a
POSIX file system may leave): every store opens, every acknowledged turn survives with the
same texts, and a resume keeps every event shown before it as it was, runs no tool whose
result was shown, and answers every acknowledged delivery."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.power_support import Ack, check_store, turns_of
from tests.eve_cli.rt_support import DANGER_TOOL, AgentFactory, call, reply, side_effect_tool
from tests.power_cut import Disk

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

MIXES = 2  # seeded mixed states per moment, besides "all synced" and "all as now"


@dataclass
class Run:
    rt: Runtime
    disk: Disk
    acks: list[Ack] = field(default_factory=list)
    sid: str = ""

    def ack(self, label: str, delivered: str | None = None, *, turns: bool = True) -> None:
        """Note an acknowledgement: of the session's turns as shown now (a drive returned),
        or only of a delivery (``turns=False``: a turn is running, nothing of it is)."""
        at = self.disk.mark(label)
        shown = turns_of(self.rt.session(self.sid)) if turns else []
        self.acks.append(Ack(at, shown, delivered))


async def chat_with_tools(run: Run) -> None:
    rt = run.rt
    run.sid = await rt.create_session()
    run.ack("created")
    await rt.deliver(run.sid, "go")
    run.ack("delivered", "go", turns=False)
    await rt.drive(run.sid)
    run.ack("turn 1 done")
    await rt.deliver(run.sid, "again")
    await rt.drive(run.sid)
    run.ack("turn 2 done")


async def parked_approval(run: Run) -> None:
    rt = run.rt
    run.sid = await rt.create_session()
    await rt.deliver(run.sid, "do it")
    view = await rt.drive(run.sid)
    run.ack("parked")
    [pending] = view["pending"]
    await rt.respond(run.sid, [{"requestId": pending["requestId"], "approved": True}])
    run.ack("approved")
    await rt.drive(run.sid)
    run.ack("turn done")


async def delivery_while_running(run: Run) -> None:
    rt = run.rt
    run.sid = await rt.create_session()
    await rt.deliver(run.sid, "first")
    drive = asyncio.create_task(rt.drive(run.sid))
    while not any(e["type"] == "action.result" for e in rt.events(run.sid)):
        await asyncio.sleep(0.005)
    await rt.deliver(run.sid, "meanwhile")
    run.ack("delivered while running", "meanwhile", turns=False)
    await drive
    await rt.drive(run.sid)
    run.ack("all answered")


TOOLS_SCRIPT = [
    reply("", call("record", text="a")),
    reply("thinking about b", call("record", text="b")),
    reply("done with a and b"),
    reply("the second answer, a little longer " * 3),
]
APPROVAL_SCRIPT = [reply("asking first", call("danger", x=7)), reply("approved and done: 7")]
RUNNING_SCRIPT = [
    reply("working", call("record", text="c"), delay=0.05),
    reply("first answered"),
    reply("meanwhile answered"),
    reply("spare"),
]

Workload = Callable[[Run], Coroutine[Any, Any, None]]
WORKLOADS: dict[str, tuple[Workload, list[dict[str, Any]], str]] = {
    "chat-with-tools": (chat_with_tools, TOOLS_SCRIPT, "record"),
    "parked-approval": (parked_approval, APPROVAL_SCRIPT, "danger"),
    "delivery-while-running": (delivery_while_running, RUNNING_SCRIPT, "record"),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_crash_state_opens_and_keeps_what_was_acknowledged(
    name: str, tmp_path: Path, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload, script, tool = WORKLOADS[name]
    log = tmp_path / "effects.log"
    tools = {"rec": side_effect_tool(log)} if tool == "record" else {"danger": DANGER_TOOL}
    agent = make_agent(script=script, tools=tools)
    base = tmp_path / "device"
    base.mkdir()
    disk = Disk(base)
    with monkeypatch.context() as patch:
        disk.install(patch)
        run = Run(Runtime(data_dir=base / "data", agent_dir=agent), disk)
        asyncio.run(workload(run))
        run.rt.close()
        disk.mark("end")
    assert len(disk.moments) > 10, "the workload synced too little to test anything"
    checked = resumed = 0
    for moment in disk.moments:
        for state, choice in disk.states(moment, MIXES, seed=hash(name) & 0xFFFF):
            target = tmp_path / "states" / f"{moment.number}-{state}"
            disk.build(moment, choice, target)
            required = [a for a in run.acks if a.at <= moment.number + 1]  # from its mark on
            where = f"crash state {target.name} ({moment.label!r})"
            resumed += check_store(target / "data", agent, run.sid, required, log, where)
            checked += 1
            shutil.rmtree(target)
    assert resumed > len(disk.moments)  # most states held a session to resume
