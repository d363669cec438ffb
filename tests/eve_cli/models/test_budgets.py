"""Usage, cost and budgets: costs from the price table, a conversation parked at a budget
("continue (+N) or stop"), a task failed naming it, and a park that survives kill -9."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from eve_cli._events import Event
from eve_cli._usage import usage_totals
from eve_cli.models import Price, price_for
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, call, reply
from tests.eve_cli.test_durability import Proc
from tests.worlds import WorldOpener

# $1 per million input tokens, $2 per million output, cached reads at a tenth.
PRICES = {"scripted": {"input": 1, "output": 2, "cache_read": 0.1}}
USAGE = {"input": 200_000, "output": 50_000, "cache_read": 100_000}  # $0.21 a call
CALL_COST = (100_000 * 1 + 100_000 * 0.1 + 50_000 * 2) / 1e6


def priced_agent(make_agent: AgentFactory, limits: str, n: int = 4) -> Path:
    script = [reply(f"step {i}", call("note", text=str(i)), usage=USAGE) for i in range(n - 1)]
    script.append(reply("done", usage=USAGE))
    tool = (
        "from eve_cli import tool\n\n@tool\ndef note(text: str) -> str:\n"
        '    """Note."""\n    return text\n'
    )
    folder = make_agent(script=script, agent_args=f"limits=Limits({limits})", tools={"n": tool})
    (folder / "prices.json").write_text(json.dumps(PRICES))
    return folder


def steps(rt: Runtime, sid: str) -> list[Event]:
    """The completed steps that called the model (a step that parks at a budget calls none)."""
    return [e for e in rt.events(sid) if e["type"] == "step.completed" and "cost" in e]


def test_price_table_matches_by_prefix_and_the_agent_wins() -> None:
    assert price_for("anthropic:claude-sonnet-4-5-20250929") == price_for(
        "anthropic:claude-sonnet-4"
    )
    assert price_for("openai:gpt-4o-mini-2024-07-18") != price_for("openai:gpt-4o")
    assert price_for("openai-responses:gpt-5") == price_for("openai:gpt-5")
    assert price_for("openai:my-model") is None
    mine = Price(1, 1)
    assert price_for("openai:gpt-4o", {"gpt-4o": mine}) is mine
    cost = Price(3, 15, cache_read=0.3, cache_write=3.75).cost(
        {"input": 1000, "output": 10, "cacheRead": 600, "cacheWrite": 300}
    )
    assert cost == pytest.approx((100 * 3 + 600 * 0.3 + 300 * 3.75 + 10 * 15) / 1e6)


def test_cost_totals_are_recorded_usage_times_the_table(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = priced_agent(make_agent, "")

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session()
        await rt.deliver(sid, "go")
        assert (await rt.drive(sid))["status"] == "waiting"
        done = steps(rt, sid)
        assert len(done) == 4
        price = Price(1, 2, cache_read=0.1)
        for event in done:
            usage = event["usage"]
            assert usage == {
                "inputTokens": 200_000,
                "outputTokens": 50_000,
                "cacheReadTokens": 100_000,
            }
            recorded = {
                "input": usage["inputTokens"],
                "output": usage["outputTokens"],
                "cacheRead": usage["cacheReadTokens"],
            }
            assert event["cost"] == pytest.approx(price.cost(recorded))
        session, turns = usage_totals(rt.events(sid))
        assert session["cost"] == pytest.approx(4 * CALL_COST)
        assert turns["t1"]["usage"]["inputTokens"] == 800_000
        assert rt.session(sid).get("cost", session["cost"]) == pytest.approx(4 * CALL_COST)

    asyncio.run(main())


@pytest.mark.parametrize("go_on", [True, False])
def test_a_cost_budget_parks_then_continues_or_stops(
    make_agent: AgentFactory, open_world: WorldOpener, go_on: bool
) -> None:
    agent = priced_agent(make_agent, "cost_per_session=0.5")

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session()
        await rt.deliver(sid, "go")
        view = await rt.drive(sid)  # 3 calls: $0.63 >= $0.50
        assert (view["status"], view["parkedOn"]) == ("parked", "approval")
        [ask] = view["pending"]
        assert ask["reason"] == "limit"
        assert ask["message"] == "Budget reached: cost per session. Continue (+$0.5) or stop?"
        assert len(steps(rt, sid)) == 3
        await rt.respond(sid, [{"requestId": ask["requestId"], "approved": go_on}])
        view = await rt.drive(sid)
        if not go_on:
            assert view["turns"][0]["status"] == "failed"
            assert "stopped at the cost limit" in view["turns"][0]["error"]
            return
        # +$0.50 from $0.63: the last call, the answer.
        assert view["turns"][0]["status"] == "completed", view
        assert len(steps(rt, sid)) == 4

    asyncio.run(main())


def test_a_turn_budget_fails_a_task_naming_it(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = priced_agent(make_agent, "tokens_per_turn=600_000")

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session(mode="task")
        await rt.deliver(sid, "go")
        view = await rt.drive(sid)
        assert view["status"] == "failed"
        error = view["turns"][0]["error"]
        assert "limit reached: tokens per turn (600000 tokens" in error, error

    asyncio.run(main())


def test_a_turn_budget_starts_again_each_turn(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    script = [reply(f"answer {i}", usage=USAGE) for i in range(3)]
    agent = make_agent(script=script, agent_args="limits=Limits(tokens_per_turn=250_000)")

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session()
        for i in range(3):  # each turn spends 250,000 tokens in one call: never parked
            await rt.deliver(sid, f"hi {i}")
            assert (await rt.drive(sid))["status"] == "waiting"

    asyncio.run(main())


@pytest.mark.slow
def test_a_budget_park_survives_kill_9(tmp_path: Path, make_agent: AgentFactory) -> None:
    agent = priced_agent(make_agent, "cost_per_session=0.5")
    data = str(tmp_path / "data")
    rt = Runtime(data_dir=data, agent_dir=agent)
    sid = asyncio.run(rt.create_session())
    asyncio.run(rt.deliver(sid, "go"))
    # Killed the moment the budget request is written: a new process finds it parked, once.
    Proc(data, str(agent), "drive", sid).kill_at("EVENT input.requested")
    lines = Proc(data, str(agent), "drive", sid).finish()
    assert lines[-1] == "VIEW parked", lines
    view = Runtime(data_dir=data, agent_dir=agent).session(sid)
    [ask] = view["pending"]
    assert "Continue (+$0.5)" in ask["message"]
    rt = Runtime(data_dir=data, agent_dir=agent)
    asyncio.run(rt.respond(sid, [{"requestId": ask["requestId"], "approved": True}]))
    lines = Proc(data, str(agent), "drive", sid).finish()
    assert lines[-1] == "VIEW waiting", lines
    events = Runtime(data_dir=data, agent_dir=agent).events(sid)
    assert [e["type"] for e in events].count("input.requested") == 1
    session, _ = usage_totals(events)
    assert sum("cost" in e for e in events if e["type"] == "step.completed") == 4
    assert session["cost"] == pytest.approx(4 * CALL_COST)
