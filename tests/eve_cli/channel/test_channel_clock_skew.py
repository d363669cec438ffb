"""Workers whose clocks disagree (real `eve start` processes on one PostgreSQL world, one of
them with its clock shifted by the test hook `EVE_TEST_CLOCK_SKEW`): timers and schedule
ticks go by the world's clock (the database's), so a sleeping turn wakes neither early nor late
whichever worker fires it, and each tick of a schedule runs once, at its time."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.channel.channel_support import WAIT, EveProcess, eventually
from tests.eve_cli.rt_support import call, reply, write_agent
from tests.pg_support import fresh_schema

pytestmark = pytest.mark.slow  # real processes killed with SIGKILL

API = "/eve/v1"
JSON = {"content-type": "application/json"}
NAP = 3.0  # seconds a turn sleeps
SKEW = 30.0  # seconds a skewed worker's clock is off by
EARLY = 0.2  # how much earlier than its time a wake may be seen (offsets, polling)
LATE = 2.5  # how much later (a loaded machine: a takeover, a worker's start)


@pytest.fixture
def world_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


def start(
    eve_process: Callable[..., EveProcess],
    monkeypatch: pytest.MonkeyPatch,
    agent: Path,
    world: str,
    skew: float,
) -> EveProcess:
    with monkeypatch.context() as env:
        if skew:
            env.setenv("EVE_TEST_CLOCK_SKEW", str(skew))
        return eve_process("start", "--port", "0", "--agent", str(agent), "--world", world)


def view(server: EveProcess, sid: str) -> dict[str, Any]:
    return dict(httpx.get(f"{server.url}{API}/session/{sid}", timeout=WAIT).json())


def woken(server: EveProcess, sid: str) -> float:
    """When (this process's clock) the session's turn is seen done, polled often."""
    deadline = time.time() + NAP + SKEW + WAIT
    while time.time() < deadline:
        if view(server, sid)["status"] == "waiting":
            return time.time()
        time.sleep(0.05)
    raise AssertionError(f"session {sid} never woke")


@pytest.mark.parametrize(
    ("sleeper_skew", "other_skew", "kill_sleeper"),
    [
        (0.0, SKEW, False),  # the other's clock ahead: it must not fire the timer early
        (0.0, -SKEW, True),  # the other's clock behind: it must not fire it late
        (SKEW, 0.0, True),  # the sleeper's clock ahead: its wake time must not be late
        (-SKEW, 0.0, True),  # the sleeper's clock behind: its wake time must not be early
    ],
)
def test_a_sleeping_turn_wakes_on_time_whichever_worker_fires_it(
    tmp_path: Path,
    eve_process: Callable[..., EveProcess],
    monkeypatch: pytest.MonkeyPatch,
    world_url: str,
    sleeper_skew: float,
    other_skew: float,
    kill_sleeper: bool,
) -> None:
    script = [reply("", call("sleep", seconds=NAP)), reply("awake now")]
    agent = write_agent(tmp_path / "agent", script=script, agent_args="sleep=True")
    sleeper = start(eve_process, monkeypatch, agent, world_url, sleeper_skew)
    other = start(eve_process, monkeypatch, agent, world_url, other_skew)
    sent = time.time()
    made = httpx.post(f"{sleeper.url}{API}/session", json={"message": "nap"}, headers=JSON)
    sid = str(made.json()["sessionId"])
    assert eventually(lambda: view(sleeper, sid)["parkedOn"] == "sleep")
    parked = time.time()  # the turn went to sleep between `sent` and now
    if kill_sleeper:  # the other worker alone can wake it
        sleeper.signal(signal.SIGKILL)
        sleeper.wait()
    awake = woken(other, sid)
    assert awake >= sent + NAP - EARLY, f"woke {sent + NAP - awake:.2f} s early"
    assert awake <= parked + NAP + LATE, f"woke {awake - parked - NAP:.2f} s late"


def test_a_schedule_s_ticks_run_once_each_at_their_time_on_workers_whose_clocks_disagree(
    tmp_path: Path,
    eve_process: Callable[..., EveProcess],
    monkeypatch: pytest.MonkeyPatch,
    world_url: str,
) -> None:
    agent = write_agent(tmp_path / "agent", script=[reply("ticked")])
    (agent / "schedules").mkdir()
    (agent / "schedules" / "beat.md").write_text("---\nevery: 1s\n---\nBeat.\n")
    began = time.time()
    workers = [
        start(eve_process, monkeypatch, agent, world_url, skew) for skew in (SKEW, 0.0, -SKEW)
    ]

    def made() -> list[tuple[float, str]]:
        rt = Runtime(data_dir=world_url, agent_dir=agent)
        try:
            return rt.schedule_sessions().get("beat", [])
        finally:
            rt.close()

    assert eventually(lambda: len(made()) >= 4)
    for worker in workers:
        worker.signal(signal.SIGTERM)
        worker.wait()
    ended = time.time()
    ticks = [tick for tick, _ in made()]
    counts = Counter(ticks)
    assert max(counts.values()) == 1, counts  # never two sessions for one tick
    # Each at its time: no tick from a clock ahead (in the future when it ran) or behind
    # (before any worker started).
    assert all(began - 1.0 <= tick <= ended + 0.5 for tick in ticks), (began, ticks, ended)
