"""Schedules under `eve start` (real processes): a tick every second starts one session each,
across a SIGKILL right at a tick and a restart, and across two workers on one PostgreSQL
world; `GET /eve/v1/schedules` lists them and `POST /eve/v1/schedules/{name}` runs one now."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.channel.channel_support import WAIT, EveProcess, eventually
from tests.eve_cli.rt_support import reply, write_agent
from tests.pg_support import fresh_schema

API = "/eve/v1"
JSON = {"content-type": "application/json"}


def ticking(tmp_path: Path) -> Path:
    agent = write_agent(tmp_path / "agent", script=[reply("ticked")])
    (agent / "schedules").mkdir()
    (agent / "schedules" / "beat.md").write_text("---\nevery: 1s\n---\nBeat.\n")
    return agent


def start(eve_process: Callable[..., EveProcess], agent: Path, world: str) -> EveProcess:
    return eve_process("start", "--port", "0", "--agent", str(agent), "--world", world)


def made(agent: Path, world: str) -> list[tuple[float, str]]:
    rt = Runtime(data_dir=world, agent_dir=agent)
    try:
        return rt.schedule_sessions().get("beat", [])
    finally:
        rt.close()


def settled(agent: Path, world: str, runs: list[tuple[float, str]]) -> bool:
    rt = Runtime(data_dir=world, agent_dir=agent)
    try:
        return all(rt.session(sid)["status"] == "completed" for _, sid in runs)
    finally:
        rt.close()


def test_a_kill_at_a_tick_and_a_restart_start_each_tick_once(
    tmp_path: Path, eve_process: Callable[..., EveProcess], world_spec: str
) -> None:
    agent = ticking(tmp_path)
    first = start(eve_process, agent, world_spec)
    first.stderr_until(r"schedule beat: tick \S+ started session")
    first.signal(signal.SIGKILL)  # at the tick: its session made, maybe not yet driven
    first.wait()
    before = made(agent, world_spec)
    second = start(eve_process, agent, world_spec)
    assert eventually(lambda: len(made(agent, world_spec)) >= len(before) + 2)
    second.signal(signal.SIGTERM)
    second.wait()
    runs = made(agent, world_spec)
    counts = Counter(tick for tick, _ in runs)
    assert max(counts.values()) == 1, counts  # never two sessions for one tick
    assert all(tick == int(tick) for tick in counts)  # whole seconds: the schedule's ticks
    assert {tick for tick, _ in before} <= set(counts)
    assert settled(agent, world_spec, runs)  # the one made at the kill ran too, once


@pytest.fixture
def world_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


def test_two_workers_start_each_tick_once(
    tmp_path: Path, eve_process: Callable[..., EveProcess], world_url: str
) -> None:
    agent = ticking(tmp_path)
    workers = [start(eve_process, agent, world_url) for _ in range(2)]
    began = max(t for t, _ in made(agent, world_url)) if made(agent, world_url) else time.time()
    assert eventually(lambda: len([t for t, _ in made(agent, world_url) if t > began]) >= 3)
    for worker in workers:
        worker.signal(signal.SIGTERM)
        worker.wait()
    ticks = sorted(t for t, _ in made(agent, world_url) if t > began)
    assert len(ticks) == len(set(ticks))  # one session per tick
    # And no tick left out, but one both workers looked at too late (a loaded machine) and
    # said so: a worker that does not start a tick it saw go by says it skipped it.
    skipped = {t for worker in workers for t in skipped_ticks(worker.stderr_lines)}
    left_out = set(range(int(ticks[0]), int(ticks[-1]) + 1)) - set(map(int, ticks))
    assert left_out <= skipped, (left_out, [w.stderr_lines for w in workers])
    # Each ran once: a session made at the tick the workers were stopped at may not have run
    # yet (stopping drains what runs, it starts nothing new); it is not lost, the next worker
    # runs it.
    runs = made(agent, world_url)
    if not settled(agent, world_url, runs):
        again = start(eve_process, agent, world_url)
        assert eventually(lambda: settled(agent, world_url, runs))
        again.signal(signal.SIGTERM)
        again.wait()
    assert Counter(tick for tick, _ in made(agent, world_url)).most_common(1)[0][1] == 1


ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00"  # a tick as the scheduler writes it


def skipped_ticks(lines: list[str]) -> set[int]:
    """The ticks of a one-second schedule the scheduler's lines say it skipped."""
    import datetime as dt

    out: set[int] = set()
    for line in lines:
        found = re.search(rf"skipped \d+ tick\(s\), ({ISO})(?: to ({ISO}))?:", line)
        if found:
            first, last = (dt.datetime.fromisoformat(g).timestamp() for g in
                           (found.group(1), found.group(2) or found.group(1)))  # fmt: skip
            out |= set(range(int(first), int(last) + 1))
    return out


def test_schedules_are_listed_and_run_now_over_http(
    tmp_path: Path, eve_process: Callable[..., EveProcess]
) -> None:
    agent = write_agent(tmp_path / "agent", script=[reply("done")])
    (agent / "schedules").mkdir()
    (agent / "schedules" / "daily.md").write_text("---\ncron: 0 9 * * *\n---\nReport.\n")
    (agent / "schedules" / "broken.md").write_text("---\nevery: often\n---\nx\n")
    server = start(eve_process, agent, str(tmp_path / "data"))
    server.stderr_until(r"schedule not loaded: .*broken\.md:2: every 'often'")
    listing = httpx.get(f"{server.url}{API}/schedules", timeout=WAIT).json()
    [row] = listing["schedules"]
    assert (row["name"], row["when"], row["sessions"]) == ("daily", "cron 0 9 * * *", 0)
    assert row["next"].endswith("T09:00:00+00:00")
    [problem] = listing["problems"]
    assert "broken.md:2:" in problem
    ran = httpx.post(f"{server.url}{API}/schedules/daily", headers=JSON, timeout=WAIT)
    assert ran.status_code == 202, ran.text
    sid = ran.json()["sessionId"]

    def view() -> dict[str, Any]:
        return dict(httpx.get(f"{server.url}{API}/session/{sid}", timeout=WAIT).json())

    assert eventually(lambda: view()["status"] == "completed")
    assert view()["turns"][0]["input"] == "Report."
    unknown = httpx.post(f"{server.url}{API}/schedules/nope", headers=JSON, timeout=WAIT)
    assert unknown.status_code == 404
    again = httpx.get(f"{server.url}{API}/schedules", timeout=WAIT).json()["schedules"][0]
    assert again["sessions"] == 1 and again["lastSession"] == sid


def ticked(agent: Path, world: str, seen: int) -> bool:
    """More tick sessions than ``seen`` exist: a tick went by."""
    return len(made(agent, world)) > seen


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_workers_killed_in_turn_start_each_tick_once(
    tmp_path: Path, eve_process: Callable[..., EveProcess]
) -> None:
    """Two workers on one PostgreSQL world, one of them SIGKILLed every few ticks (at a
    tick, mid-drive) and started again: every tick's session is made once, every one made
    runs to its end (a killed worker's is taken over), and a tick left out was said skipped."""
    with fresh_schema(lease="1.5") as url:
        agent = ticking(tmp_path)
        workers = [start(eve_process, agent, url) for _ in range(2)]
        began = time.time()
        lines: list[str] = []
        for round_ in range(8):
            victim = workers[round_ % 2]
            assert eventually(partial(ticked, agent, url, len(made(agent, url))))
            victim.signal(signal.SIGKILL)
            victim.wait()
            lines += victim.stderr_lines
            workers[round_ % 2] = start(eve_process, agent, url)
        assert eventually(lambda: len([t for t, _ in made(agent, url) if t > began]) >= 12)
        for worker in workers:
            worker.signal(signal.SIGTERM)
            worker.wait()
            lines += worker.stderr_lines
        runs = [(t, sid) for t, sid in made(agent, url) if t > began]
        counts = Counter(tick for tick, _ in runs)
        assert max(counts.values()) == 1, counts  # never two sessions for one tick
        left_out = set(range(int(min(counts)), int(max(counts)) + 1)) - set(map(int, counts))
        assert left_out <= skipped_ticks(lines), (sorted(left_out), lines[-20:])
        # The sessions a killed worker made or drove are finished by the workers after it.
        restart = start(eve_process, agent, url)
        assert eventually(lambda: settled(agent, url, runs), timeout=60), runs
        restart.signal(signal.SIGTERM)
        restart.wait()
