"""OpenTelemetry spans of a turn (SPEC §14), exported over OTLP/HTTP to a real receiver: the
tree turn → step → model call / tool call / compaction with the GenAI conventions, on every
world; content only when asked for; nothing imported when tracing is off."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eve_cli import _tracing
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, call, reply
from tests.otlp_receiver import Receiver, Span
from tests.worlds import WorldOpener

TOOLS = {
    "main": """
    from eve_cli import tool

    @tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b
    """
}


def by_name(spans: list[Span], prefix: str) -> list[Span]:
    return [s for s in spans if s.name.startswith(prefix)]


def run_turns(agent: Path, world: WorldOpener | None, *messages: str) -> str:
    async def main() -> str:
        rt = Runtime(agent_dir=agent, world=world() if world else None)
        try:
            sid = await rt.create_session()
            for message in messages:
                await rt.deliver(sid, message)
                await rt.drive(sid)
            return sid
        finally:
            rt.close()

    sid = asyncio.run(main())
    _tracing.shutdown()  # exports what is pending
    return sid


def test_a_turn_is_a_span_tree_with_the_genai_conventions(
    receiver: Receiver, make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[
            reply("", call("add", a=2, b=3)),
            reply("five"),
            reply("word " * 800),
            reply("after"),
        ],
        tools=TOOLS,
        # A small window: the third turn's model call needs older history compacted first.
        agent_args="tracing=True, context_window=600",
    )
    sid = run_turns(agent, open_world, "add 2 and 3", "say a lot", "and now?")
    spans = receiver.wait_for(lambda s: len(by_name(s, "invoke_agent")) == 3)

    [turn] = [s for s in by_name(spans, "invoke_agent") if s.attributes["eve.turn.id"] == "t1"]
    assert turn.trace_id == f"{_tracing.trace_id(sid, 't1'):032x}"
    assert turn.parent_id == "" and turn.span_id == f"{_tracing.span_id(sid, 't1', 'turn'):016x}"
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == sid
    assert turn.attributes["eve.turn.status"] == "completed"
    assert turn.service == "eve"
    mine = [s for s in spans if s.trace_id == turn.trace_id]
    steps = by_name(mine, "step ")
    assert sorted(s.name for s in steps) == ["step t1.0", "step t1.1"]
    assert all(s.parent_id == turn.span_id for s in steps)
    step0 = next(s for s in steps if s.name == "step t1.0")
    [tool] = by_name(mine, "execute_tool")
    assert tool.name == "execute_tool add" and tool.parent_id == step0.span_id
    assert tool.attributes["gen_ai.tool.name"] == "add"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_0_0"
    chats = by_name(mine, "chat ")
    assert len(chats) == 2 and {c.parent_id for c in chats} == {s.span_id for s in steps}
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
        assert chat.start_ns <= chat.end_ns
    assert turn.attributes["gen_ai.usage.input_tokens"] == sum(
        s.attributes["gen_ai.usage.input_tokens"] for s in steps
    )
    assert turn.start_ns <= min(s.start_ns for s in mine)
    assert turn.end_ns >= max(s.end_ns for s in mine)
    # Content is recorded only when asked for.
    for span in spans:
        assert not {k for k in span.attributes if "messages" in k or "call.arguments" in k}
        assert "add 2 and 3" not in json.dumps(span.attributes)

    [compaction] = by_name(spans, "compaction")
    third = _tracing.trace_id(sid, "t3")
    assert compaction.trace_id == f"{third:032x}"
    assert compaction.attributes["gen_ai.usage.output_tokens"] > 0


GATED = {
    "main": """
    from eve_cli import always, tool

    @tool(approval=always())
    def gate() -> str:
        \"\"\"Needs approval.\"\"\"
        return "open"
    """
}


def test_a_turn_parked_and_resumed_by_another_runtime_is_one_trace(
    receiver: Receiver, make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[reply("", call("gate")), reply("went through")],
        tools=GATED,
        agent_args="tracing=True",
    )

    async def park() -> tuple[str, str]:
        rt = Runtime(agent_dir=agent, world=open_world())
        try:
            sid = await rt.create_session()
            await rt.deliver(sid, "open it")
            view = await rt.drive(sid)
            assert view["status"] == "parked", view
            return sid, str(view["pending"][0]["requestId"])
        finally:
            rt.close()

    async def resume(sid: str, request: str) -> None:
        rt = Runtime(agent_dir=agent, world=open_world())  # another process would do the same
        try:
            await rt.respond(sid, [{"requestId": request, "approved": True}])
            view = await rt.drive(sid)
            assert view["turns"][0]["status"] == "completed", view
        finally:
            rt.close()

    sid, request = asyncio.run(park())
    _tracing.shutdown()
    parked = receiver.wait_for(lambda s: any(x.name == "step t1.0" for x in s))
    assert not by_name(parked, "invoke_agent")  # the turn has not ended: no span yet
    asyncio.run(resume(sid, request))
    _tracing.shutdown()
    spans = receiver.wait_for(lambda s: bool(by_name(s, "invoke_agent")))
    assert {s.trace_id for s in spans} == {f"{_tracing.trace_id(sid, 't1'):032x}"}
    [turn] = by_name(spans, "invoke_agent")
    assert sorted(s.name for s in by_name(spans, "step ")) == ["step t1.0", "step t1.1"]
    assert {s.parent_id for s in by_name(spans, "step ")} == {turn.span_id}
    [tool] = by_name(spans, "execute_tool")  # run after the approval, in step 1
    step1 = next(s for s in spans if s.name == "step t1.1")
    assert tool.parent_id == step1.span_id
    assert turn.start_ns < step1.start_ns and turn.attributes["eve.turn.steps"] == 2


def test_content_is_recorded_only_when_asked_for(
    receiver: Receiver, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_tracing.ENV, "1")  # every agent's turns, without the option
    monkeypatch.setenv(_tracing.CONTENT_ENV, "true")
    agent = make_agent(script=[reply("", call("add", a=2, b=3)), reply("five")], tools=TOOLS)
    run_turns(agent, None, "add 2 and 3")
    spans = receiver.wait_for(lambda s: bool(by_name(s, "invoke_agent")))
    first = next(s for s in by_name(spans, "chat ") if "add 2 and 3" in str(s.attributes))
    assert "add 2 and 3" in first.attributes["gen_ai.input.messages"]
    assert json.loads(first.attributes["gen_ai.output.messages"])[0]["tool_calls"][0]["name"] == (
        "add"
    )
    [tool] = by_name(spans, "execute_tool")
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 3}
    assert tool.attributes["gen_ai.tool.call.result"] == "5"


def test_tracing_off_imports_no_opentelemetry(make_agent: AgentFactory) -> None:
    agent = make_agent(script=[reply("", call("add", a=1, b=1)), reply("two")], tools=TOOLS)
    code = textwrap.dedent(
        f"""
        import asyncio, sys
        from eve_cli.runtime import Runtime
        from world import MemoryWorld

        async def main():
            rt = Runtime(agent_dir={str(agent)!r}, world=MemoryWorld())
            sid = await rt.create_session()
            await rt.deliver(sid, "add")
            view = await rt.drive(sid)
            assert view["turns"][0]["status"] == "completed", view
            rt.close()

        asyncio.run(main())
        wanted = ("opentelemetry", "eve_cli._tracing.")
        print(sorted(m for m in sys.modules if m.startswith(wanted)))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_cache_and_reasoning_tokens_and_the_turn_cost_are_span_attributes(
    receiver: Receiver, make_agent: AgentFactory
) -> None:
    usage = {"input": 1000, "output": 200, "cache_read": 600, "cache_write": 300, "reasoning": 50}
    agent = make_agent(script=[reply("hi", usage=usage)], agent_args="tracing=True")
    (agent / "prices.json").write_text('{"scripted": {"input": 1, "output": 2}}')
    run_turns(agent, None, "hello")
    spans = receiver.wait_for(lambda s: len(by_name(s, "invoke_agent")) == 1)
    [chat] = by_name(spans, "chat ")
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 600
    assert chat.attributes["gen_ai.usage.cache_creation.input_tokens"] == 300
    assert chat.attributes["eve.usage.reasoning_tokens"] == 50
    [turn] = by_name(spans, "invoke_agent")
    assert turn.attributes["eve.turn.cost_usd"] == (1000 * 1 + 200 * 2) / 1e6


def test_the_turns_principal_is_the_spans_enduser(
    receiver: Receiver, make_agent: AgentFactory
) -> None:
    agent = make_agent(script=[reply("hi"), reply("again")], agent_args="tracing=True")

    async def main() -> None:
        rt = Runtime(agent_dir=agent)
        try:
            sid = await rt.create_session()
            await rt.deliver(sid, "hello", by={"subject": "alice", "tenant": "acme"})
            await rt.drive(sid)
            await rt.deliver(sid, "and you?")  # no principal: no enduser
            await rt.drive(sid)
        finally:
            rt.close()

    asyncio.run(main())
    _tracing.shutdown()
    spans = receiver.wait_for(lambda s: len(by_name(s, "invoke_agent")) == 2)
    users = sorted((s.attributes["eve.turn.id"], s.name.split()[0], s.attributes.get("enduser.id"))
                   for s in spans if s.name.startswith(("invoke_agent", "step ")))  # fmt: skip
    assert users == [("t1", "invoke_agent", "alice"), ("t1", "step", "alice"),
                     ("t2", "invoke_agent", None), ("t2", "step", None)]  # fmt: skip


def test_the_mcp_servers_start_up_is_a_span_of_its_own(
    receiver: Receiver, make_agent: AgentFactory, tmp_path: Path
) -> None:
    """Started before the step's model call, in the step: the chat span is the call alone."""
    from tests.eve_cli.mcp_tests.mcp_support import mcp_agent, stdio_entry

    script = [reply("", call("mcp__good__add", a=1, b=2)), reply("three")]
    servers = {"good": stdio_entry(tmp_path / "good")}
    agent = mcp_agent(make_agent, script, servers, agent_args="tracing=True")
    sid = run_turns(agent, None, "add them")
    spans = receiver.wait_for(lambda s: len(by_name(s, "invoke_agent")) == 1)
    [started] = by_name(spans, "mcp tools")
    [step0] = [s for s in by_name(spans, "step ") if s.name == "step t1.0"]
    assert started.parent_id == step0.span_id
    assert started.trace_id == f"{_tracing.trace_id(sid, 't1'):032x}"
    assert started.attributes["gen_ai.operation.name"] == "mcp_tools"
    first = min(by_name(spans, "chat "), key=lambda s: s.start_ns)
    assert started.end_ns <= first.start_ns  # not inside the model call's time
