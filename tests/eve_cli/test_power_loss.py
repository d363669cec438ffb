"""Power cuts at every sync of real workloads (tests/power_cut.py builds the crash states a
POSIX file system may leave): every store opens, every acknowledged turn survives with the
same texts, and a resume keeps every event shown before it as it was, runs no tool whose
result was shown, and answers every acknowledged delivery."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from power_cut import Disk, Moment
from rt_support import DANGER_TOOL, AgentFactory, call, reply, side_effect_tool

from eve_cli.runtime import Runtime

MIXES = 2  # seeded mixed states per moment, besides "all synced" and "all as now"


@dataclass
class Ack:
    """What the workload was told, and when (moments before this one need not keep it)."""

    at: int
    turns: list[Any] = field(default_factory=list)  # the session's turns as then shown
    delivered: str | None = None  # a message whose delivery was acknowledged


@dataclass
class Run:
    rt: Runtime
    disk: Disk
    acks: list[Ack] = field(default_factory=list)
    sid: str = ""

    def ack(self, label: str, delivered: str | None = None) -> None:
        at = self.disk.mark(label)
        self.acks.append(Ack(at, turns_of(self.rt.session(self.sid)), delivered))


def turns_of(view: dict[str, Any]) -> list[Any]:
    """Each turn's input, and each step's text and finished actions."""
    return [
        (
            turn["id"],
            turn.get("input"),
            [(step.get("text"), _finished(step)) for step in turn["steps"]],
        )
        for turn in view["turns"]
    ]


def _finished(step: dict[str, Any]) -> list[Any]:
    actions = [a for a in step.get("actions", []) if a.get("status") == "completed"]
    return [(a["callId"], a["name"], a.get("status"), a.get("output")) for a in actions]


def shown(events: list[dict[str, Any]]) -> dict[int, Any]:
    """The events as a reader shows them, without times."""
    drop = {"at", "index", "sessionId", "durationMs", "continuationToken"}
    return {e["index"]: sorted((k, repr(v)) for k, v in e.items() if k not in drop) for e in events}


async def chat_with_tools(run: Run) -> None:
    rt = run.rt
    run.sid = await rt.create_session()
    run.ack("created")
    await rt.deliver(run.sid, "go")
    run.ack("delivered", "go")
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
    run.ack("delivered while running", "meanwhile")
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

WORKLOADS: dict[str, tuple[Callable[[Run], Awaitable[None]], list[dict[str, Any]], str]] = {
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
            resumed += _check(target, moment, run, agent, log)
            checked += 1
            shutil.rmtree(target)
    assert resumed > len(disk.moments)  # most states held a session to resume


def _check(target: Path, moment: Moment, run: Run, agent: Path, log: Path) -> bool:
    where = f"crash state {target.name} ({moment.label!r})"
    required = [a for a in run.acks if a.at <= moment.number + 1]  # its mark's moment on
    rt = Runtime(data_dir=target / "data", agent_dir=agent)  # every state opens
    try:
        if run.sid not in {row["id"] for row in rt.sessions()}:
            assert not required, f"{where}: the acknowledged session is gone"
            return False
        before = rt.session(run.sid)
        for ack in required:
            now = turns_of(before)
            for turn in ack.turns:
                match = [t for t in now if t[0] == turn[0]]
                assert match, f"{where}: acknowledged turn {turn[0]} is gone"
                assert match[0][1] == turn[1], f"{where}: turn {turn[0]} input differs"
                steps = match[0][2]
                kept = [
                    (text, [a for a in actions if a in dict(steps[i : i + 1]).get(text, [])])
                    for i, (text, actions) in enumerate(turn[2])
                ]  # each step's text, and the actions finished then (more may be since)
                assert kept == turn[2], f"{where}: turn {turn[0]} differs: {turn[2]} -> {steps}"
        events = shown(rt.events(run.sid))
        results = {e["callId"] for e in rt.events(run.sid) if e["type"] == "action.result"}
        ran_before = len(log.read_text().splitlines()) if log.exists() else 0
        asyncio.run(rt.drive(run.sid))
        after = shown(rt.events(run.sid))
        for index, event in events.items():
            assert after.get(index) == event, (
                f"{where}: event {index} changed on resume: {event} -> {after.get(index)}"
            )
        lines = log.read_text().splitlines()[ran_before:] if log.exists() else []
        again = [line for line in lines if line.split(":")[-1] in results]
        assert not again, f"{where}: a tool whose result was shown ran again: {again}"
        received = {e.get("text") for e in rt.events(run.sid) if e["type"] == "message.received"}
        for ack in required:
            if ack.delivered is not None:
                assert ack.delivered in received, (
                    f"{where}: delivery {ack.delivered!r} lost; events after the resume: "
                    f"{[(e['type'], e.get('text') or e.get('error')) for e in rt.events(run.sid)]}"
                )
        return True
    finally:
        rt.close()
