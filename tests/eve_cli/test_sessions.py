"""Sessions on every world: turns, steps, tools, approvals, questions, operations."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from eve_cli.execution._view import SessionView
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, call, reply, tool_file, types
from tests.worlds import WorldOpener

RECORD = tool_file('''
    counter = define_state("count", 0)

    @tool
    def record(text: str) -> str:
        """Record a text."""
        n = counter.update(lambda c: c + 1)
        return f"recorded {text} as #{n}"

    @tool
    def explode(reason: str) -> str:
        """Fails."""
        raise ValueError(reason)

    @tool(approval=always())
    def launch(target: str) -> str:
        """Needs approval."""
        return f"launched {target}"

    @tool(approval=once())
    def deploy(env: str) -> str:
        """Asks once per session."""
        return f"deployed {env}"
''')


async def start(open_world: WorldOpener, agent: Path, **kw: Any) -> tuple[Runtime, str]:
    rt = Runtime(agent_dir=agent, world=open_world())
    return rt, await rt.create_session(**kw)


async def say(rt: Runtime, sid: str, text: str) -> SessionView:
    receipt = await rt.deliver(sid, text)
    assert receipt.disposition != "rejected", receipt
    return await rt.drive(sid)


def results(rt: Runtime, sid: str) -> list[tuple[str, str, bool]]:
    return [
        (e["name"], e["output"], e["isError"])
        for e in rt.events(sid)
        if e["type"] == "action.result"
    ]


def texts(rt: Runtime, sid: str) -> list[str]:
    return [e["text"] for e in rt.events(sid) if e["type"] == "message.completed"]


def test_tool_call_turn_has_two_steps_and_no_extra_model_call(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[reply("", call("record", text="a")), reply("all done")], tools={"t": RECORD}
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "go")
        assert view["status"] == "waiting"
        assert types(rt.events(sid)) == [
            "session.started",
            "session.waiting",
            "turn.started",
            "message.received",
            "step.started",
            "message.completed",
            "actions.requested",
            "action.result",
            "step.completed",
            "step.started",
            "message.completed",
            "step.completed",
            "turn.completed",
            "session.waiting",
        ]
        assert results(rt, sid) == [("record", "recorded a as #1", False)]
        assert texts(rt, sid)[-1] == "all done"
        assert (
            "".join(e["delta"] for e in rt.events(sid) if e["type"] == "message.appended")
            == "all done"
        )
        [turn] = view["turns"]
        assert [s["status"] for s in turn["steps"]] == ["completed", "completed"]

    asyncio.run(main())


def test_invalid_input_and_raising_tool_are_tool_errors(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[
            reply("", call("record", text=5), call("explode", reason="boom"), call("nope", x=1)),
            reply("recovered"),
        ],
        tools={"t": RECORD},
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "go")
        [(n1, o1, e1), (n2, o2, e2), (n3, o3, e3)] = results(rt, sid)
        assert (n1, e1) == ("record", True) and "text: Input should be a valid string" in o1
        assert (n2, e2) == ("explode", True) and "ValueError: boom" in o2
        assert (n3, e3) == ("nope", True) and "Unknown tool 'nope'" in o3
        assert view["turns"][0]["status"] == "completed"
        assert texts(rt, sid)[-1] == "recovered"

    asyncio.run(main())


def test_approval_approve_deny_and_always(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[
            reply("", call("launch", target="moon")),
            reply("ok 1"),
            reply("", call("launch", target="mars")),
            reply("ok 2"),
            reply("", call("launch", target="venus")),
            reply("ok 3"),
            reply("", call("launch", target="pluto")),
            reply("ok 4"),
        ],
        tools={"t": RECORD},
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)

        async def answer(**response: Any) -> SessionView:
            view = rt.session(sid)
            assert (view["status"], view["parkedOn"]) == ("parked", "approval")
            [request] = view["pending"]
            assert request["tool"] == "launch"
            await rt.respond(sid, [{"requestId": request["requestId"], **response}])
            return await rt.drive(sid)

        await say(rt, sid, "1")
        assert (await answer(approved=True))["status"] == "waiting"
        await say(rt, sid, "2")
        await answer(approved=False)
        await say(rt, sid, "3")
        await answer(approved=True, always=True)
        view = await say(rt, sid, "4")  # no question asked this time
        assert view["status"] == "waiting"
        assert results(rt, sid) == [
            ("launch", "launched moon", False),
            ("launch", "The user denied this call.", True),
            ("launch", "launched venus", False),
            ("launch", "launched pluto", False),
        ]
        rejected = [e for e in rt.events(sid) if e["type"] == "action.result"][1]
        assert rejected["status"] == "rejected"

    asyncio.run(main())


def test_once_asks_only_the_first_time(make_agent: AgentFactory, open_world: WorldOpener) -> None:
    agent = make_agent(
        script=[
            reply("", call("deploy", env="a")),
            reply("1"),
            reply("", call("deploy", env="b")),
            reply("2"),
        ],
        tools={"t": RECORD},
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "first")
        assert view["status"] == "parked"
        await rt.respond(sid, [{"requestId": view["pending"][0]["requestId"], "approved": True}])
        await rt.drive(sid)
        view = await say(rt, sid, "second")
        assert view["status"] == "waiting"
        assert [r[1] for r in results(rt, sid)] == ["deployed a", "deployed b"]

    asyncio.run(main())


def test_ask_question_parks_until_answered(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[
            reply("", call("ask_question", question="Colour?", options=["red", "blue"])),
            reply("blue it is"),
        ]
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "pick")
        assert (view["status"], view["parkedOn"]) == ("parked", "question")
        [request] = view["pending"]
        assert request["question"] == "Colour?" and request["options"] == ["red", "blue"]
        await rt.respond(sid, [{"requestId": request["requestId"], "answer": "blue"}])
        view = await rt.drive(sid)
        assert view["status"] == "waiting"
        assert results(rt, sid) == [("ask_question", "blue", False)]
        assert "input.resolved" in types(rt.events(sid))

    asyncio.run(main())


def test_state_survives_turns_and_reset_clears_it(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[
            reply("", call("record", text="a")),
            reply("1"),
            reply("", call("record", text="b")),
            reply("2"),
            reply("", call("record", text="c")),
            reply("3"),
        ],
        tools={"t": RECORD},
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        await say(rt, sid, "x")
        await say(rt, sid, "y")
        await rt.reset(sid)
        await rt.drive(sid)
        await say(rt, sid, "z")
        assert [r[1] for r in results(rt, sid)] == [
            "recorded a as #1",
            "recorded b as #2",
            "recorded c as #1",
        ]

    asyncio.run(main())


def test_cancel_while_parked_ends_turn_and_session_goes_on(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[reply("", call("launch", target="x")), reply("after cancel")],
        tools={"t": RECORD},
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        await say(rt, sid, "launch")
        await rt.cancel(sid)
        view = await rt.drive(sid)
        assert view["status"] == "waiting"
        assert view["turns"][0]["status"] == "cancelled"
        assert "turn.cancelled" in types(rt.events(sid))
        assert results(rt, sid) == [("launch", "The turn was cancelled.", True)]
        await say(rt, sid, "again")
        assert texts(rt, sid)[-1] == "after cancel"

    asyncio.run(main())


def test_task_mode_cannot_park(make_agent: AgentFactory, open_world: WorldOpener) -> None:
    agent = make_agent(script=[reply("", call("ask_question", question="?"))])

    async def main() -> None:
        rt, sid = await start(open_world, agent, mode="task")
        view = await say(rt, sid, "do it")
        assert view["status"] == "failed"
        assert "a task cannot wait for input" in view["turns"][0]["error"]
        assert (await rt.deliver(sid, "more")).disposition == "rejected"

    asyncio.run(main())


def test_scripted_exhaustion_fails_the_turn_clearly(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(script=[reply("", call("record", text="a"))], tools={"t": RECORD})

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "go")
        assert view["status"] == "waiting"
        error = view["turns"][0]["error"]
        assert "exhausted" in error and "model call 1" in error and "script.json" in error

    asyncio.run(main())


def test_model_calls_per_step(make_agent: AgentFactory, open_world: WorldOpener) -> None:
    agent = make_agent(
        script=[reply("", call("record", text="a")), reply("done")],
        tools={"t": RECORD},
        agent_args="model_calls_per_step=2",
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "go")
        assert len(view["turns"][0]["steps"]) == 1
        assert texts(rt, sid) == ["", "done"]

    asyncio.run(main())


def test_changed_tool_definition_applies_at_next_turn(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    version = tool_file('''
        @tool
        def version() -> str:
            """Which version."""
            return "v1"
    ''')
    agent = make_agent(
        script=[reply("", call("version")), reply("a"), reply("", call("version")), reply("b")],
        tools={"v": version},
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        await say(rt, sid, "one")
        path = agent / "tools" / "v.py"
        path.write_text(version.replace('"v1"', '"v2"') + "\n")
        await say(rt, sid, "two")
        assert [r[1] for r in results(rt, sid)] == ["v1", "v2"]

    asyncio.run(main())


@pytest.mark.parametrize("policy", ["steer", "queue"])
def test_delivery_during_a_running_turn(
    make_agent: AgentFactory, policy: str, open_world: WorldOpener
) -> None:
    # The reply takes a second: the delivery below must come while the turn runs, also when
    # a loaded machine shows the turn's first event late (0.3 s was not always enough).
    agent = make_agent(script=[reply("working", delay=1.0), reply("second answer")])

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        await rt.deliver(sid, "first")
        driving = asyncio.create_task(rt.drive(sid))
        async for event in rt.tail(sid):
            if event["type"] == "message.appended":
                break
        receipt = await rt.deliver(sid, "extra", turn_policy=policy)  # type: ignore[arg-type]
        assert receipt.disposition == ("steered" if policy == "steer" else "queued")
        view = await asyncio.wait_for(driving, 10)
        view = await rt.drive(sid)
        received = [
            (e.get("turnId"), e["text"]) for e in rt.events(sid) if e["type"] == "message.received"
        ]
        if policy == "steer":
            assert received == [("t1", "first"), ("t1", "extra")]
            assert len(view["turns"]) == 1
        else:
            assert received == [("t1", "first"), ("t2", "extra")]
            assert len(view["turns"]) == 2
        assert texts(rt, sid) == ["working", "second answer"]

    asyncio.run(main())


def test_concurrent_deliveries_are_all_kept(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    """D7 under concurrency: several senders at once during a turn; each learns where its
    message went and none is lost."""
    agent = make_agent(script=[reply("working", delay=1.0)] + [reply(f"r{i}") for i in range(5)])

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        await rt.deliver(sid, "first")
        driving = asyncio.create_task(rt.drive(sid))
        async for event in rt.tail(sid):
            if event["type"] == "message.appended":
                break
        sends = [("s1", "steer"), ("q1", "queue"), ("s2", "steer"), ("q2", "queue")]
        receipts = await asyncio.gather(
            *(rt.deliver(sid, text, turn_policy=policy) for text, policy in sends)  # type: ignore[arg-type]
        )
        assert [r.disposition for r in receipts] == ["steered", "queued", "steered", "queued"]
        await asyncio.wait_for(driving, 10)
        view = await rt.drive(sid)
        assert view["status"] == "waiting"
        assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        received = [
            (e.get("turnId"), e["text"]) for e in rt.events(sid) if e["type"] == "message.received"
        ]
        # Concurrent senders are not ordered among themselves (on a network world each
        # delivery commits on its own connection): both steers join t1, each queued message
        # opens a turn of its own.
        assert received[0] == ("t1", "first")
        assert sorted(received[1:3]) == [("t1", "s1"), ("t1", "s2")]
        assert sorted(text for _, text in received[3:]) == ["q1", "q2"]
        assert [turn for turn, _ in received[3:]] == ["t2", "t3"]

    asyncio.run(main())


def test_callable_approval_policy(make_agent: AgentFactory, open_world: WorldOpener) -> None:
    pay = tool_file('''
        def small_only(arguments: dict) -> str:
            if arguments["amount"] > 100:
                return "denied"
            return "approved" if arguments["amount"] < 10 else "user-approval"

        @tool(approval=small_only)
        def pay(amount: int) -> str:
            """Pay an amount."""
            return f"paid {amount}"
    ''')
    agent = make_agent(
        script=[
            reply("", call("pay", amount=5), call("pay", amount=500), call("pay", amount=50)),
            reply("done"),
        ],
        tools={"p": pay},
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "pay")
        [request] = view["pending"]
        assert request["arguments"] == {"amount": 50}
        await rt.respond(sid, [{"requestId": request["requestId"], "approved": True}])
        await rt.drive(sid)
        assert results(rt, sid) == [
            ("pay", "paid 5", False),
            ("pay", "The approval policy denied this call.", True),
            ("pay", "paid 50", False),
        ]

    asyncio.run(main())


SLOW = tool_file('''
    import time

    @tool(approval=always())
    def slow(seconds: float) -> str:
        """Sleeps, then answers."""
        time.sleep(seconds)
        return "slept"
''')


def test_tool_duration_is_the_run_not_the_wait_for_approval(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(
        script=[reply("", call("slow", seconds=0.2)), reply("ok")], tools={"t": SLOW}
    )

    async def main() -> None:
        rt, sid = await start(open_world, agent)
        view = await say(rt, sid, "go")
        [request] = view["pending"]
        await asyncio.sleep(1.0)  # the user thinks; this is not the tool's time
        await rt.respond(sid, [{"requestId": request["requestId"], "approved": True}])
        await rt.drive(sid)
        [result] = [e for e in rt.events(sid) if e["type"] == "action.result"]
        assert 200 <= result["durationMs"] < 1000, result

    asyncio.run(main())
