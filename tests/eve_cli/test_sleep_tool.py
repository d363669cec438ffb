"""The built-in sleep tool (SPEC §16, `define_agent(sleep=True)`), on every World: the turn
parks on a durable timer (no drive runs meanwhile), goes on when it is due — in a runtime that
never saw it sleep — and a message wakes it early and is folded into the turn; the model is
told how long it slept. (Across SIGKILL and `eve start`: test_sleep_restart.py.)"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import call, reply, write_agent
from world import World


def sleeper(root: Path, world: World, **arguments: Any) -> tuple[Runtime, str]:
    script = [reply("", call("sleep", **arguments)), reply("awake now")]
    agent = write_agent(root, script=script, agent_args="sleep=True")
    rt = Runtime(agent_dir=agent, world=world)
    return rt, asyncio.run(rt.create_session())


def results(rt: Runtime, sid: str) -> list[Any]:
    return [(m["role"], m["content"]) for m in rt.history(sid) if m["role"] in ("tool", "user")]


def test_a_sleep_parks_on_a_timer_and_wakes_when_it_is_due(tmp_path: Path, world: World) -> None:
    rt, sid = sleeper(tmp_path / "agent", world, seconds=0.8)

    async def main() -> None:
        await rt.deliver(sid, "nap")
        view = await rt.drive(sid)
        assert (view["status"], view["parkedOn"]) == ("parked", "sleep")
        assert view["wakeAt"] is not None and sid in rt.timers()
        assert sid not in rt.resumable()
        # Another runtime on the same world (another process) finds the timer and drives it.
        other = Runtime(agent_dir=rt.agent.directory, world=world)
        assert await other.wait(sid, timeout=10)
        assert sid in other.resumable()
        view = await other.drive(sid)
        assert view["status"] == "waiting" and view["wakeAt"] is None
        assert sid not in other.timers()

    began = time.monotonic()
    asyncio.run(main())
    elapsed = time.monotonic() - began
    assert elapsed >= 0.75
    [(_, _), (_, slept)] = results(rt, sid)
    # What the model is told: at least the time asked for, at most what really passed (a
    # loaded machine wakes it late; an upper bound of its own would be a race).
    said = re.fullmatch(r"Slept ([0-9.]+) s, until \S+\.", slept)
    assert said is not None, slept
    assert 0.8 <= float(said.group(1)) <= round(elapsed, 1) + 0.05, (slept, elapsed)


def test_a_message_wakes_a_sleep_early_and_reaches_the_model(tmp_path: Path, world: World) -> None:
    rt, sid = sleeper(tmp_path / "agent", world, seconds=3600)

    async def main() -> None:
        await rt.deliver(sid, "nap")
        assert (await rt.drive(sid))["parkedOn"] == "sleep"
        receipt = await rt.deliver(sid, "wake up")
        assert receipt.disposition == "steered"  # folded into the sleeping turn
        view = await rt.drive(sid)
        assert view["status"] == "waiting"

    began = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - began < 30
    [nap, slept, woke] = results(rt, sid)
    assert nap == ("user", "nap") and woke == ("user", "wake up")
    assert slept[1].startswith("Woken early by a message after ") and "of the 1 h asked" in slept[1]
    texts = [e["text"] for e in rt.events(sid) if e["type"] == "message.completed"]
    assert texts[-1] == "awake now"


def test_a_queued_message_does_not_wake_the_sleep(tmp_path: Path, world: World) -> None:
    rt, sid = sleeper(tmp_path / "agent", world, seconds=0.8)

    async def main() -> None:
        await rt.deliver(sid, "nap")
        await rt.drive(sid)
        assert (await rt.deliver(sid, "later", turn_policy="queue")).disposition == "queued"
        assert (await rt.drive(sid))["parkedOn"] == "sleep"
        assert await rt.wait(sid, timeout=10)
        await rt.drive(sid)

    asyncio.run(main())
    [_, slept, *rest] = results(rt, sid)
    assert slept[1].startswith("Slept ") and rest[0] == ("user", "later")


@pytest.mark.parametrize(("arguments", "start"), [
    ({}, "Invalid arguments for tool 'sleep'"),
    ({"seconds": 1, "until": "2030-01-01T00:00:00"}, "Invalid arguments for tool 'sleep'"),
    ({"until": "yesterday"}, "Invalid arguments for tool 'sleep'"),
    ({"until": "2001-01-01T00:00:00Z"}, "Did not sleep: 2001-01-01T00:00:00+00:00 has passed"),
])  # fmt: skip
def test_a_sleep_with_no_time_ahead_does_not_park(
    tmp_path: Path, world: World, arguments: dict[str, Any], start: str
) -> None:
    rt, sid = sleeper(tmp_path / "agent", world, **arguments)
    asyncio.run(rt.deliver(sid, "nap"))
    assert asyncio.run(rt.drive(sid))["status"] == "waiting"
    assert results(rt, sid)[1][1].startswith(start)


def test_the_sleep_tool_is_opt_in(tmp_path: Path, world: World) -> None:
    agent = write_agent(tmp_path / "plain", script=[reply("hi")])
    assert "sleep" not in Runtime(agent_dir=agent, world=world).agent.tools
