"""Compaction, clear, limits and sub-agents, on every world."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from eve_cli._events import Event
from eve_cli.execution._view import SessionView
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import DANGER_TOOL, AgentFactory, call, reply, tool_file, types
from tests.worlds import WorldOpener

SMALL = "context_window=300, compaction=Compaction(threshold_percent=0.9, reserved_tokens=0)"
LONG = "x" * 400  # about 100 tokens
NOOP = tool_file(
    """
    @tool
    def noop() -> str:
        \"\"\"Does nothing.\"\"\"
        return "ok"
    """
)


async def start(open_world: WorldOpener, agent: Path, **kw: Any) -> tuple[Runtime, str]:
    rt = Runtime(agent_dir=agent, world=open_world())
    return rt, await rt.create_session(**kw)


async def say(rt: Runtime, sid: str, text: str) -> SessionView:
    await rt.deliver(sid, text)
    return await rt.drive(sid)


def of_type(rt: Runtime, sid: str, kind: str) -> list[Event]:
    return [e for e in rt.events(sid) if e["type"] == kind]


def test_compaction_before_the_model_call_keeps_recent_tail(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(script=[reply(f"answer {i}") for i in range(4)], agent_args=SMALL)

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        for i in range(4):
            view = await say(rt, sid, f"message {i} {LONG}")
            assert view["status"] == "waiting"
        [done, *_] = of_type(rt, sid, "compaction.completed")
        assert done["status"] == "completed" and done["removedMessages"] > 0
        events = [e["type"] for e in rt.events(sid) if e.get("turnId") == done["turnId"]]
        at = events.index("compaction.requested")
        assert events[at - 1 : at + 3] == [
            "step.started",
            "compaction.requested",
            "compaction.completed",
            "message.appended",
        ]
        history = rt.history(sid)
        assert history[0]["content"].startswith("[Summary of the earlier conversation]")
        assert "message 0" in history[0]["content"]  # the summary covers the oldest turn
        assert history[-1] == {"role": "assistant", "content": "answer 3", "tool_calls": []}
        assert rt.session(sid)["compactions"] >= 1

    asyncio.run(main())


def test_a_turn_longer_than_the_window_compacts_within_itself(
    make_agent: AgentFactory, open_world: WorldOpener, tmp_path: Path
) -> None:
    """One turn of many steps outgrows the window: it is cut between its steps (never at a
    tool result), its recent steps kept."""
    steps = 12
    script = [reply(f"step {i} {LONG}", call("noop")) for i in range(steps)] + [reply("done")]
    agent = make_agent(script=script, agent_args=SMALL, tools={"noop": NOOP})

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "work")
        assert view["status"] == "waiting" and len(view["turns"][0]["steps"]) == steps + 1
        done = [e for e in of_type(rt, sid, "compaction.completed") if e["status"] == "completed"]
        assert len(done) >= 2 and all(e["turnId"] == "t1" for e in done)  # more than once
        assert not of_type(rt, sid, "compaction.requested")[len(done) :]  # each one cut
        history = rt.history(sid)
        assert history[0]["content"].startswith("[Summary of the earlier conversation]")
        assert history[1]["role"] == "assistant"  # the tail starts at a step, not a result
        assert history[-1]["content"] == "done"
        assert len(history) < 2 * steps  # the window stayed small

    asyncio.run(main())


def test_a_history_of_many_short_steps_is_cut(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    """Short messages are mostly per-message overhead in the estimate: the cut counts them the
    same way, so a long turn of tiny steps compacts (it is not left uncut, re-walked by every
    step while it grows past the model's window)."""
    steps = 240  # ~11 estimated tokens a step (3 of text): past 1,800 by step ~160
    script = [reply("", call("noop")) for _ in range(steps)] + [reply("done")]
    roomy = "context_window=2000, compaction=Compaction(threshold_percent=0.9, reserved_tokens=0)"
    agent = make_agent(script=script, agent_args=roomy, tools={"noop": NOOP})

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "work")
        assert view["status"] == "waiting" and len(view["turns"][0]["steps"]) == steps + 1
        done = of_type(rt, sid, "compaction.completed")
        assert done and all(e["status"] == "completed" for e in done)
        assert all(e["removedMessages"] > 0 for e in done)
        assert len(done) <= 4, len(done)  # each cut leaves room for dozens of steps, not one
        # Every message estimates at least 5 tokens: a window under the threshold (1,800)
        # holds fewer than 360 of the turn's 481.
        assert len(rt.history(sid)) < 360

    asyncio.run(main())


def test_long_instructions_leave_the_kept_tail_less_room(
    make_agent: AgentFactory, open_world: WorldOpener, tmp_path: Path
) -> None:
    """Instructions of ~1,000 tokens in a 2,000-token window: the tail a compaction keeps is
    half of what they leave the history, not half the threshold."""
    turns = 14
    roomy = "context_window=2000, compaction=Compaction(threshold_percent=0.9, reserved_tokens=0)"
    agent = make_agent(
        script=[reply(f"answer {i}") for i in range(turns)],
        agent_args=roomy,
        instructions="Follow the rules. " + "rule " * 800,  # ~1,000 tokens
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        for i in range(turns):
            view = await say(rt, sid, f"message {i} {LONG}")  # ~100 tokens a turn
            assert view["status"] == "waiting"
        done = of_type(rt, sid, "compaction.completed")
        assert done and all(e["status"] == "completed" and e["removedMessages"] for e in done)
        # Each cut leaves the next turn's request inside the model's window (cut by half the
        # threshold, it kept ~900 tokens of history beside the ~1,000 of instructions: the
        # requests that asked for a compaction went over 2,000 and stayed there).
        asked = [e["estimatedTokens"] for e in of_type(rt, sid, "compaction.requested")]
        assert len(asked) == len(done), asked
        assert all(n is not None and n < 2000 for n in asked), asked
        assert rt.history(sid)[0]["content"].startswith("[Summary of the earlier conversation]")

    asyncio.run(main())


def test_a_resumed_turn_keeps_the_cut_its_compaction_made(
    make_agent: AgentFactory, open_world: WorldOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn that compacted, then parked on an approval, is replayed when answered: its
    compaction keeps the cut the first run journaled, even where the code that chooses a cut
    now chooses another (an upgrade while the turn waited). Two sessions go the same way; the
    replay of one is given another cut: both end with the same history."""
    from eve_cli.harness import _compaction

    script = [reply(f"answer {i}") for i in range(3)]
    script += [reply("", call("danger", x=1)), reply("done")]
    agent = make_agent(script=script, agent_args=SMALL, tools={"danger": DANGER_TOOL})
    chosen = _compaction._tail_budget

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sids = [await rt.create_session(), await rt.create_session()]
        for sid in sids:
            for i in range(4):
                view = await say(rt, sid, f"message {i} {LONG}")
            assert view["status"] == "parked"  # on the approval, after a compaction
            assert [e["turnId"] for e in of_type(rt, sid, "compaction.completed")][-1] == "t4"
        for sid, budgets in zip(sids, [iter([150]), iter([])], strict=True):
            monkeypatch.setattr(
                _compaction,
                "_tail_budget",
                lambda *args, given=budgets: next(given, None) or chosen(*args),
            )
            [pending] = (await rt.call(rt.session, sid))["pending"]
            await rt.respond(sid, [{"requestId": pending["requestId"], "approved": True}])
            assert (await rt.drive(sid))["turns"][-1]["status"] == "completed"
            assert next(budgets, None) is None  # (the replay asked)
        changed, plain = (rt.history(sid) for sid in sids)
        assert changed == plain

    asyncio.run(main())


def test_failed_compaction_keeps_history_and_is_reported(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    script = {"responses": [reply(f"answer {i}") for i in range(3)], "summary_error": "nope"}
    agent = make_agent(script=script, agent_args=SMALL)

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        for i in range(3):
            view = await say(rt, sid, f"message {i} {LONG}")
        failed = of_type(rt, sid, "compaction.completed")
        assert failed and all(e["status"] == "failed" for e in failed)
        assert "nope" in failed[0]["error"]
        assert [t["status"] for t in view["turns"]] == ["completed"] * 3
        assert len(rt.history(sid)) == 6  # nothing was dropped

    asyncio.run(main())


def test_compact_and_clear_operations_call_no_model(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(script=[reply("one"), reply("two"), reply("three")])

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        await say(rt, sid, "first")
        await say(rt, sid, "second")
        await rt.compact(sid)
        await rt.drive(sid)
        [done] = of_type(rt, sid, "compaction.completed")
        assert done["status"] == "completed" and done["removedMessages"] == 4
        [summary] = rt.history(sid)
        assert "user: first" in summary["content"] and "assistant: two" in summary["content"]
        await rt.clear(sid)
        view = await rt.drive(sid)
        assert view["status"] == "waiting" and of_type(rt, sid, "context.cleared")
        assert rt.history(sid) == []
        await say(rt, sid, "third")  # entry 2: compaction and clear consumed no entry
        assert rt.history(sid) == [
            {"role": "user", "content": "third"},
            {"role": "assistant", "content": "three", "tool_calls": []},
        ]

    asyncio.run(main())


def test_token_limit_asks_to_go_on_in_conversation(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[reply("", call("ask_question", question="q")), reply("done")],
        agent_args="limits=Limits(tokens_per_session=1)",
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "go")
        [question] = view["pending"]
        await rt.respond(sid, [{"requestId": question["requestId"], "answer": "a"}])
        view = await rt.drive(sid)
        assert (view["status"], view["parkedOn"]) == ("parked", "approval")
        [limit] = view["pending"]
        assert limit["reason"] == "limit" and "tokens per session" in limit["message"]
        await rt.respond(sid, [{"requestId": limit["requestId"], "approved": True}])
        view = await rt.drive(sid)
        assert view["status"] == "waiting"
        assert view["turns"][0]["status"] == "completed"

    asyncio.run(main())


def test_limits_fail_a_task_clearly(make_agent: AgentFactory, open_world: WorldOpener) -> None:
    agent = make_agent(
        script=[reply("", call("ask_question", question="q"))],
        agent_args="limits=Limits(session_timeout=0.000001)",
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent, mode="task")
        view = await say(rt, sid, "go")
        assert view["status"] == "failed"
        assert "limit reached: session timeout" in view["turns"][0]["error"]

    asyncio.run(main())


def test_subagent_runs_as_child_session(make_agent: AgentFactory, open_world: WorldOpener) -> None:
    agent = make_agent(
        script=[reply("", call("researcher", task="find x")), reply("parent done")],
        subagents={"researcher": {"script": [reply("x is 42")], "instructions": "Research."}},
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "go")
        assert view["status"] == "waiting"
        [started] = of_type(rt, sid, "task.started")
        [settled] = of_type(rt, sid, "task.settled")
        assert settled["status"] == "completed" and settled["output"] == "x is 42"
        child = started["childSessionId"]
        assert types(rt.events(child))[0] == "session.started"
        child_view = rt.session(child)
        assert child_view["status"] == "completed" and child_view["mode"] == "task"
        assert (await rt.deliver(child, "more")).disposition == "rejected"
        assert types(rt.events(child))[-1] == "session.completed"
        [result] = of_type(rt, sid, "action.result")
        assert (result["name"], result["output"]) == ("researcher", "x is 42")
        assert "turn.waiting" in types(rt.events(sid))

    asyncio.run(main())


def test_failing_subagent_is_a_tool_error(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[reply("", call("helper", task="ask")), reply("coped")],
        subagents={
            "helper": {
                "script": [reply("", call("ask_question", question="?"))],
                "instructions": "Help.",
            }
        },
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "go")
        [result] = of_type(rt, sid, "action.result")
        assert result["isError"] and "a task cannot wait for input" in result["output"]
        assert view["turns"][0]["status"] == "completed"

    asyncio.run(main())


def test_cancel_cascades_to_a_waited_subagent(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[reply("", call("helper", task="slow work")), reply("never used")],
        subagents={
            "helper": {
                "script": [reply("", call("ask_question", question="?"), delay=0.3)],
                "instructions": "Help.",
            }
        },
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        await rt.deliver(sid, "go")
        driving = asyncio.create_task(rt.drive(sid))
        async for event in rt.tail(sid):
            if event["type"] == "task.started":
                break
        await rt.cancel(sid)
        view = await asyncio.wait_for(driving, 10)
        view = await rt.drive(sid)
        assert view["status"] == "waiting"
        assert view["turns"][0]["status"] == "cancelled"
        [settled] = of_type(rt, sid, "task.settled")
        assert settled["status"] == "cancelled"
        child = settled["childSessionId"]
        assert types(rt.events(child))[-2:] == ["turn.cancelled", "session.cancelled"]

    asyncio.run(main())


def test_the_kept_history_estimate_equals_one_over_the_whole_history(
    make_agent: AgentFactory, monkeypatch: Any, open_world: WorldOpener
) -> None:
    from eve_cli.harness import _compaction, _step
    from eve_cli.models import ModelRequest, _tokens
    from eve_cli.models._tokens import estimate_request

    hosts: list[Any] = []
    checked: list[tuple[int, int]] = []
    real_estimate, real_needs = _tokens.estimate_with, _compaction.needs_compaction

    def needs(host: Any, system: str, tools: Any) -> Any:
        hosts.append(host)
        return real_needs(host, system, tools)

    def compare(system: str, tokens: int, tools: Any) -> int:
        estimate = real_estimate(system, tokens, tools)
        messages = hosts[-1].read_history()  # what the model is sent, estimated whole
        whole = estimate_request(ModelRequest(system, messages, tools=tools))
        checked.append((estimate, whole))
        return estimate

    monkeypatch.setattr(_step, "needs_compaction", needs)
    monkeypatch.setattr(_compaction, "estimate_with", compare)
    script = []
    for i in range(5):  # steps with a tool call: the history grows between two estimates
        script += [reply("", call("echo", text=f"{i} {LONG}")), reply(f"answer {i}")]
    echo = "from eve_cli import tool\n\n@tool\ndef echo(text: str) -> str:\n    return text\n"
    agent = make_agent(script=script, agent_args=SMALL, tools={"echo": echo})

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        for i in range(5):
            assert (await say(rt, sid, f"message {i} {LONG}"))["status"] == "waiting"
        assert of_type(rt, sid, "compaction.completed")  # the window was replaced meanwhile

    asyncio.run(main())
    assert len(checked) >= 10 and all(kept == whole for kept, whole in checked), checked
