"""Schedules start sessions (SPEC §16), on every World: one session per tick however many
schedulers race for it, a restart at the tick runs it once, missed ticks are skipped or caught
up once as the schedule says (a fake clock stands for the hours between). Real processes and
SIGKILL: tests/eve_cli/channel/test_channel_schedules.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eve_cli.channel._schedules import Scheduler
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import reply, write_agent
from world import World

HOUR = 3600.0
T = 1_800_000_000.0  # a whole hour (UTC)


def agent_with(root: Path, **schedules: str) -> Path:
    agent = write_agent(root, script=[reply("ticked")])
    (agent / "schedules").mkdir()
    for name, front in schedules.items():
        (agent / "schedules" / f"{name}.md").write_text(f"---\n{front}\n---\nDo the {name}.\n")
    return agent


def scheduler(rt: Runtime, now: float) -> tuple[Scheduler, list[str]]:
    kicked: list[str] = []
    return Scheduler(rt, kicked.append, lambda line: None, clock=lambda: now), kicked


def ticks(rt: Runtime, name: str) -> list[float]:
    return [tick for tick, _ in rt.schedule_sessions().get(name, [])]


def test_each_tick_starts_one_session_however_many_race_for_it(
    tmp_path: Path, world: World
) -> None:
    agent = agent_with(tmp_path / "agent", hourly="every: 1h")
    runtimes = [Runtime(agent_dir=agent, world=world) for _ in range(2)]  # two processes
    [schedule], _ = runtimes[0].schedules()

    async def main() -> None:
        tries = [rt.run_schedule(schedule, T) for rt in runtimes for _ in range(3)]
        made = await asyncio.gather(*tries)
        assert len({sid for sid, _ in made}) == 1
        assert [created for _, created in made].count(True) == 1
        view = await runtimes[1].drive(made[0][0])
        assert view["status"] == "completed"
        assert [t["input"] for t in view["turns"]] == ["Do the hourly."]  # delivered once

    asyncio.run(main())
    assert ticks(runtimes[0], "hourly") == [T]


def test_a_restart_at_the_tick_runs_it_once_and_late_ticks_are_skipped(
    tmp_path: Path, world: World
) -> None:
    agent = agent_with(tmp_path / "agent", hourly="every: 1h")

    async def look(now: float) -> list[str]:
        runner, kicked = scheduler(Runtime(agent_dir=agent, world=world), now)
        await runner.look()
        return kicked

    async def main() -> None:
        first = await look(T + 10)  # started 10 s after the tick: it runs
        assert len(first) == 1
        assert await look(T + 20) == []  # a restart at the tick: it ran already
        rt = Runtime(agent_dir=agent, world=world)
        assert ticks(rt, "hourly") == [T]
        assert len(await look(T + 2 * HOUR + 300)) == 0  # 5 min late: missed, skipped
        runner, kicked = scheduler(rt, T + 2 * HOUR + 300)
        await runner.look()
        runner._clock = lambda: T + 3 * HOUR + 1  # the next tick comes
        await runner.look()
        assert len(kicked) == 1
        assert ticks(rt, "hourly") == [T, T + 3 * HOUR]

    asyncio.run(main())


def test_a_server_that_looks_late_says_which_ticks_it_skipped(
    tmp_path: Path, world: World
) -> None:
    agent = agent_with(tmp_path / "agent", beat="every: 1m")
    rt = Runtime(agent_dir=agent, world=world)
    logged: list[str] = []
    now = [T + 1]
    runner = Scheduler(rt, lambda sid: None, logged.append, clock=lambda: now[0])

    async def main() -> None:
        await runner.look()  # the tick at T runs; the next is due at T + 60
        now[0] = T + 60 + 1
        await runner.look()  # on time: nothing skipped
        assert not [line for line in logged if "skipped" in line]
        now[0] = T + 4 * 60 + 30  # a stall: the ticks at +2 and +3 min are past their grace
        await runner.look()

    asyncio.run(main())
    [report] = [line for line in logged if "skipped" in line]
    assert "skipped 2 tick(s)" in report and "missed: skip" in report, report
    assert ticks(rt, "beat") == [T, T + 60, T + 4 * 60]  # the latest, within its grace


def test_a_long_stall_of_a_short_schedule_is_reported_without_counting_every_tick(
    tmp_path: Path, world: World
) -> None:
    agent = agent_with(tmp_path / "agent", beat="every: 1s")
    logged: list[str] = []
    now = [T + 0.5]
    rt = Runtime(agent_dir=agent, world=world)
    runner = Scheduler(rt, lambda sid: None, logged.append, clock=lambda: now[0])

    async def main() -> None:
        await runner.look()
        now[0] = T + 5000.5  # asleep for 5,000 ticks
        await runner.look()

    asyncio.run(main())
    [report] = [line for line in logged if "skipped" in line]
    assert "skipped more than 1000 ticks from" in report, report


def test_missed_once_catches_up_once_but_a_new_schedule_missed_nothing(
    tmp_path: Path, world: World
) -> None:
    agent = agent_with(tmp_path / "agent", hourly="every: 1h\nmissed: once")
    rt = Runtime(agent_dir=agent, world=world)

    async def look(now: float) -> None:
        await scheduler(Runtime(agent_dir=agent, world=world), now)[0].look()

    async def main() -> None:
        await look(T + 300)  # never ran before: nothing was missed
        assert ticks(rt, "hourly") == []
        await look(T + HOUR + 5)
        await look(T + 5 * HOUR + 300)  # four ticks missed: the latest runs, once
        await look(T + 5 * HOUR + 400)
        assert ticks(rt, "hourly") == [T + HOUR, T + 5 * HOUR]

    asyncio.run(main())


def test_a_broken_schedule_is_reported_and_the_others_run(tmp_path: Path, world: World) -> None:
    agent = agent_with(tmp_path / "agent", good="every: 1h", bad="every: soon")
    logged: list[str] = []
    rt = Runtime(agent_dir=agent, world=world)
    runner = Scheduler(rt, lambda sid: None, logged.append, clock=lambda: T + 1)
    asyncio.run(runner.look())
    asyncio.run(runner.look())
    assert ticks(rt, "good") == [T]
    [line] = [x for x in logged if "not loaded" in x]  # once, not at every look
    assert f"{agent / 'schedules' / 'bad.md'}:2: every 'soon'" in line


def test_a_py_schedule_starts_its_tick_s_session(tmp_path: Path, world: World) -> None:
    agent = write_agent(tmp_path / "agent", script=[reply("ticked")])
    (agent / "schedules").mkdir()
    (agent / "schedules" / "hourly.py").write_text(
        "from eve_cli import define_schedule\n\n"
        "schedule = define_schedule('Do the hourly.', every='1h', mode='conversation')\n"
    )
    rt = Runtime(agent_dir=agent, world=world)

    async def main() -> None:
        runner, kicked = scheduler(rt, T + 10)
        await runner.look()
        [sid] = kicked
        view = await rt.drive(sid)
        assert (view["status"], view["mode"]) == ("waiting", "conversation")
        assert [t["input"] for t in view["turns"]] == ["Do the hourly."]

    asyncio.run(main())
    assert ticks(rt, "hourly") == [T]
