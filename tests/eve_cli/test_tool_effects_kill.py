"""Declared side effects across a real crash: a process killed with SIGKILL while an `unsafe`
tool runs leaves the call parked "outcome unknown" for the next process, which never runs it
again unasked; progress the tool recorded before the kill reaches its next run. On the local
and the PostgreSQL world (`world_spec`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.effects_support import effect_tools
from tests.eve_cli.rt_support import AgentFactory, call, reply
from tests.eve_cli.test_durability import Proc

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow


def start(tmp_path: Path, make_agent: AgentFactory, data: str, name: str, **args: str) -> tuple[
    Runtime, str, Path
]:  # fmt: skip
    log = tmp_path / "effects.log"
    script = [reply("", call(name, **args)), reply("done")]
    agent = make_agent(script=script, tools={"fx": effect_tools(log)})
    rt = Runtime(data_dir=data, agent_dir=agent)
    sid = asyncio.run(rt.create_session())
    asyncio.run(rt.deliver(sid, "go"))
    Path(f"{log}.stall").write_text("")
    proc = Proc(data, str(agent), "drive", sid)
    proc.kill_at("TOOL-STALL")
    Path(f"{log}.stall").unlink()
    return rt, sid, log


def resume(rt: Runtime, sid: str, data: str) -> tuple[str, list[str]]:
    """A new process drives the session: its last status line, then the tool results."""
    lines = Proc(data, str(rt.agent.directory), "drive", sid).finish()
    return lines[-1], [m["content"] for m in rt.history(sid) if m["role"] == "tool"]


def test_a_kill_during_an_unsafe_call_parks_it_and_it_runs_again_only_when_asked(
    tmp_path: Path, make_agent: AgentFactory, world_spec: str
) -> None:
    rt, sid, log = start(tmp_path, make_agent, world_spec, "charge", amount="7")
    # A new process resumes: the call is not run again, the session asks.
    assert resume(rt, sid, world_spec) == ("VIEW parked", [])
    [request] = rt.session(sid)["pending"]
    assert (request["kind"], request["tool"]) == ("outcome", "charge")
    assert log.read_text().splitlines() == ["charge 7", "stalled"]
    answer = {"requestId": request["requestId"], "outcome": "rerun"}
    assert asyncio.run(rt.respond(sid, [answer])).disposition == "accepted"
    assert resume(rt, sid, world_spec) == ("VIEW waiting", ["charged 7"])
    assert log.read_text().splitlines() == ["charge 7", "stalled", "charge 7"]


def test_progress_recorded_before_a_kill_reaches_the_next_run(
    tmp_path: Path, make_agent: AgentFactory, world_spec: str
) -> None:
    rt, sid, log = start(tmp_path, make_agent, world_spec, "send", to="ada")
    assert resume(rt, sid, world_spec) == ("VIEW waiting", ["sent as m-1"])
    assert log.read_text().splitlines() == ["send", "stalled", "resumed True m-1"]


def test_a_timeout_resumed_after_a_kill_gets_only_the_time_left(
    tmp_path: Path, make_agent: AgentFactory, world_spec: str
) -> None:
    rt, sid, log = start(tmp_path, make_agent, world_spec, "slow", n="1")
    last, [content] = resume(rt, sid, world_spec)
    assert last == "VIEW waiting" and "timed out after 1.5 s" in content
    [result] = [e for e in rt.events(sid) if e["type"] == "action.result"]
    # The run in the new process had what the killed one left of the 1.5 s (none when the
    # restart took longer: then it does not run at all), not the whole 1.5 s again.
    assert result["durationMs"] < 1400, result
    runs = log.read_text().splitlines()
    assert runs == (["slow", "stalled", "slow"] if result["durationMs"] else ["slow", "stalled"])
