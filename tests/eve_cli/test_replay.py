"""`eve replay` (SPEC §15): a recorded session against changed agent code reports each kind of
divergence, and nothing on unchanged code. The recording is made on every world; replays run
on a memory world of their own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eve_cli._cassette import Cassette, cassette
from eve_cli._replay import play
from eve_cli.runtime import Runtime
from eve_cli.testing import chat
from tests.eve_cli.rt_support import AgentFactory, call, reply, tool_file
from world import World

TOOLS = """
@tool
def echo(text: str) -> str:
    \"\"\"Say it back.\"\"\"
    return "echo " + text

@tool(approval=always())
def deploy(target: str) -> str:
    \"\"\"Asks first.\"\"\"
    return "deployed " + target
"""
SCRIPT = [
    reply("", call("echo", text="hi")), reply("said hi"),  # turn 1
    reply("", call("deploy", target="prod")), reply("deployed it"),  # turn 2: asks
    reply("", call("helper", task="look")), reply("helped"),  # turn 3: a sub-agent
]  # fmt: skip
HELPER = {"script": [reply("child done")], "instructions": "Help."}


def _agent(make_agent: AgentFactory, tools: str = TOOLS, **kw: object) -> Path:
    kw.setdefault("subagents", {"helper": HELPER})
    return make_agent(script=SCRIPT, tools={"t": tool_file(tools)}, **kw)


def _record(world: World, agent: Path) -> Cassette:
    async def go() -> Cassette:
        rt = Runtime(agent_dir=agent, world=world)
        sid = await rt.create_session()
        await chat(rt, sid, "one")
        view = await chat(rt, sid, "two")
        await rt.respond(sid, [{"requestId": view["pending"][0]["requestId"], "approved": True}])
        await rt.drive(sid)
        await chat(rt, sid, "three")
        return cassette(sid, rt.events(sid), agent="test", model=None)

    return asyncio.run(go())


def _kinds(tape: Cassette, agent: Path, **kw: object) -> list[tuple[str, int, str | None]]:
    found = asyncio.run(play(tape, agent, **kw))  # type: ignore[arg-type]
    return [(d.kind, d.turn, d.call) for d in found.divergences]


def test_unchanged_code_replays_without_divergence_and_a_removed_tool_is_reported(
    world: World, make_agent: AgentFactory
) -> None:
    agent = _agent(make_agent)
    tape = _record(world, agent)
    assert [t["outcome"] for t in tape["turns"]] == ["completed"] * 3
    assert _kinds(tape, agent) == []
    gone = _agent(make_agent, TOOLS.replace("def echo", "def shout"))
    assert _kinds(tape, gone) == [("tool-missing", 1, "call_0_0")]


def test_each_kind_of_divergence_is_reported(make_agent: AgentFactory) -> None:
    from world import MemoryWorld

    agent = _agent(make_agent)
    tape = _record(MemoryWorld(), agent)
    strict = _agent(make_agent, TOOLS.replace("echo(text: str)", "echo(text: int)"))
    assert _kinds(tape, strict) == [("arguments-rejected", 1, "call_0_0")]
    flipped = _agent(
        make_agent,
        TOOLS.replace("@tool(approval=always())", "@tool").replace(
            "@tool\ndef echo", "@tool(approval=always())\ndef echo"
        ),
    )
    assert _kinds(tape, flipped) == [
        ("approval-changed", 1, "call_0_0"),  # asks now
        ("approval-changed", 2, "call_2_0"),  # runs without asking now
    ]
    alone = _agent(make_agent, subagents={})
    assert _kinds(tape, alone) == [("subagent-missing", 3, "call_4_0")]
    louder = _agent(make_agent, TOOLS.replace('"echo " + text', '"ECHO " + text'))
    assert _kinds(tape, louder) == []  # the recorded result stands in for the tool
    assert _kinds(tape, louder, live_tools=["echo"]) == [("result-changed", 1, "call_0_0")]
    assert _kinds(tape, agent, live_tools=["echo"]) == []
    with pytest.raises(ValueError, match="no tool 'nope'"):
        _kinds(tape, agent, live_tools=["nope"])


def test_a_moved_compaction_point_is_reported(make_agent: AgentFactory) -> None:
    from world import MemoryWorld

    long = "x" * 400
    script = [reply(f"answer {i}") for i in range(4)]
    roomy = make_agent(script=script, agent_args="context_window=100000")
    small = make_agent(
        script=script,
        agent_args="context_window=300, compaction=Compaction(threshold_percent=0.9, "
        "reserved_tokens=0)",
    )

    async def go() -> Cassette:
        rt = Runtime(agent_dir=roomy, world=MemoryWorld())
        sid = await rt.create_session()
        for i in range(4):
            await chat(rt, sid, f"message {i} {long}")
        return cassette(sid, rt.events(sid), agent="test", model=None)

    tape = asyncio.run(go())
    assert _kinds(tape, roomy) == []
    kinds = {kind for kind, _, _ in _kinds(tape, small)}
    assert kinds == {"compaction-moved"}


def test_an_mcp_call_is_answered_from_the_recording_without_starting_its_server(
    make_agent: AgentFactory,
) -> None:
    events: list[dict[str, object]] = [
        {"type": "message.received", "turnId": "t1", "text": "go", "disposition": "started"},
        {"type": "message.completed", "turnId": "t1", "stepIndex": 0, "text": ""},
        {"type": "actions.requested", "turnId": "t1", "stepIndex": 0,
         "actions": [{"callId": "m1", "name": "mcp__files__read", "arguments": {"p": "a"}}]},
        {"type": "action.result", "turnId": "t1", "stepIndex": 0, "callId": "m1",
         "status": "completed", "isError": False, "output": "contents of a"},
        {"type": "message.completed", "turnId": "t1", "stepIndex": 1, "text": "read it"},
        {"type": "turn.completed", "turnId": "t1"},
    ]  # fmt: skip
    tape = cassette("s_x", events, agent="a", model=None)
    served = make_agent(script=[])
    # A server that cannot start: a replay never starts it.
    (served / "mcp.json").write_text('{"mcpServers": {"files": {"command": "/nonexistent"}}}')
    assert _kinds(tape, served) == []
    assert _kinds(tape, make_agent(script=[])) == [("tool-missing", 1, "m1")]
