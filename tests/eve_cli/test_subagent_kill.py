"""Sub-agent sessions under kill -9 at every durable write: a parent delegating to a
sub-agent whose tool records its runs, its driver killed (SIGKILL, `EVE_FAULTS`) just before
or right after each journal write of the whole turn, on a data directory and on PostgreSQL.
A new process then finishes the turn: the events equal an uninterrupted run's, the child's
tool ran under one idempotency key, completed once when the kill came after a write and at
most twice when before (its result record not yet written), and the parent's reply is the
child's."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, brief, call, reply, side_effect_tool
from tests.eve_cli.test_durability import Proc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # a killed process per write point

PARENT = [reply("", call("helper", task="record c")), reply("parent done")]


def _session(data: str, agent: Path) -> tuple[Runtime, str]:
    rt = Runtime(data_dir=data, agent_dir=agent)
    sid = asyncio.run(rt.create_session())
    asyncio.run(rt.deliver(sid, "go"))
    return rt, sid


def _agent(make_agent: AgentFactory, log: Path) -> Path:
    child = {
        "script": [reply("", call("record", text="c")), reply("child done")],
        "tools": {"rec": side_effect_tool(log)},
        "instructions": "Help.",
    }
    return make_agent(script=PARENT, subagents={"helper": child}, agent_args="name='parent'")


def test_a_subagent_turn_killed_at_every_write_finishes_once(
    tmp_path: Path, make_agent: AgentFactory, world_spec: str
) -> None:
    log = tmp_path / "effects.log"
    agent = _agent(make_agent, log)
    ref_rt, ref_sid = _session(str(tmp_path / "ref"), agent)
    assert asyncio.run(ref_rt.drive(ref_sid))["status"] == "waiting"
    reference = [(t, d.replace(ref_sid, "SID")) for t, d in brief(ref_rt.events(ref_sid))]
    ref_rt.close()
    log.unlink()
    killed, point = 0, 0
    while True:
        point += 1
        fault = "crash_after_fsync" if point % 2 else "crash_before_write"
        n = (point + 1) // 2
        spec = world_spec if world_spec.startswith("postgresql") else str(tmp_path / f"w{point}")
        rt, sid = _session(spec, agent)
        first = Proc(spec, str(agent), "drive", sid, env={"EVE_FAULTS": f"{fault}@{n}"})
        first.finish()
        if first.popen.returncode != -signal.SIGKILL:
            rt.close()
            break  # past the turn's last write: every point was tried
        killed += 1
        lines = Proc(spec, str(agent), "drive", sid).finish()
        assert lines[-1] == "VIEW waiting", (fault, n, lines)
        got = [(t, d.replace(sid, "SID")) for t, d in brief(rt.events(sid))]
        assert got == reference, (fault, n)
        lines = log.read_text().splitlines()
        runs = Counter(line.split()[0] for line in lines)
        assert len({line.split()[1] for line in lines}) == 1, lines  # one idempotency key
        # A result made durable is never run again; one killed before its record is written
        # runs once more (at least once, under the same key).
        most = 1 if fault == "crash_after_fsync" else 2
        assert 1 <= runs["end"] <= most and runs["start"] <= 2, (fault, n, runs)
        log.unlink()
        rt.close()
    assert killed >= 10  # the sweep reached the whole turn
