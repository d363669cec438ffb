"""A sleeping session across real restarts of `eve start` (SIGKILL): the next server wakes it
on time, a message to it wakes it early; on PostgreSQL a surviving worker wakes a dead one's
sleeping session (several workers share a PostgreSQL world only)."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eve_cli.channel.channel_support import WAIT, EveProcess, eventually
from tests.eve_cli.rt_support import call, reply, write_agent
from tests.pg_support import fresh_schema

API = "/eve/v1"
JSON = {"content-type": "application/json"}


def sleeper(tmp_path: Path, seconds: float) -> Path:
    script = [reply("", call("sleep", seconds=seconds)), reply("awake now")]
    return write_agent(tmp_path / "agent", script=script, agent_args="sleep=True")


def start(eve_process: Callable[..., EveProcess], agent: Path, world: str) -> EveProcess:
    return eve_process("start", "--port", "0", "--agent", str(agent), "--world", world)


def view(server: EveProcess, sid: str) -> dict[str, Any]:
    return dict(httpx.get(f"{server.url}{API}/session/{sid}", timeout=WAIT).json())


def asleep(server: EveProcess, agent_text: str = "nap") -> str:
    """A new session whose turn sleeps (driven by ``server``)."""
    body = {"message": agent_text}
    sid = str(httpx.post(f"{server.url}{API}/session", json=body, headers=JSON).json()["sessionId"])
    assert eventually(lambda: view(server, sid)["parkedOn"] == "sleep")
    return sid


def tool_result(server: EveProcess, sid: str) -> str:
    [action] = [a for t in view(server, sid)["turns"] for s in t["steps"] for a in s["actions"]]
    return str(action["output"])


def asleep_then_killed(
    eve_process: Callable[..., EveProcess], agent: Path, world: str
) -> tuple[EveProcess, str]:
    """A session put to sleep by a server killed with SIGKILL, then a new server."""
    first = start(eve_process, agent, world)
    sid = asleep(first)
    first.signal(signal.SIGKILL)
    first.wait()
    return start(eve_process, agent, world), sid


def test_a_killed_server_s_sleeping_session_wakes_on_time_in_the_next_one(
    tmp_path: Path, eve_process: Callable[..., EveProcess], world_spec: str
) -> None:
    began = time.monotonic()
    second, sid = asleep_then_killed(eve_process, sleeper(tmp_path, 2.0), world_spec)
    serving = time.monotonic() - began  # a loaded machine may start it after the sleep's time
    assert eventually(lambda: view(second, sid)["status"] == "waiting")
    assert time.monotonic() - began >= 2.0
    slept = re.match(r"Slept (\d+(?:\.\d)?) s", tool_result(second, sid))  # "12 s" past 10
    assert slept is not None, tool_result(second, sid)
    # Woken at its time, or as soon as the next server serves when that is later.
    assert float(slept.group(1)) <= max(2.0, serving) + 1.0, (slept.group(0), serving)


def test_a_message_wakes_a_sleep_early_after_a_kill(
    tmp_path: Path, eve_process: Callable[..., EveProcess], world_spec: str
) -> None:
    second, sid = asleep_then_killed(eve_process, sleeper(tmp_path, 3600), world_spec)
    sent = httpx.post(f"{second.url}{API}/session/{sid}", json={"message": "wake up"}, headers=JSON)
    assert sent.json()["disposition"] == "steered"
    assert eventually(lambda: view(second, sid)["status"] == "waiting")
    assert tool_result(second, sid).startswith("Woken early by a message after ")
    turn = view(second, sid)["turns"][-1]
    assert turn["steps"][-1]["text"] == "awake now"


@pytest.fixture
def world_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


def test_a_surviving_worker_wakes_a_dead_worker_s_sleeping_session(
    tmp_path: Path, eve_process: Callable[..., EveProcess], world_url: str
) -> None:
    agent = sleeper(tmp_path, 1.5)
    first = start(eve_process, agent, world_url)
    second = start(eve_process, agent, world_url)
    sid = asleep(first)
    first.signal(signal.SIGKILL)
    first.wait()
    assert eventually(lambda: view(second, sid)["status"] == "waiting")
    assert tool_result(second, sid).startswith("Slept 1.")


def test_a_sleep_another_process_started_is_woken_on_time_by_a_running_server(
    tmp_path: Path, eve_process: Callable[..., EveProcess], world_spec: str
) -> None:
    agent = sleeper(tmp_path, 2.0)
    server = start(eve_process, agent, world_spec)  # reads every timer now, and not again soon
    chat = subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "chat", "--agent", str(agent), "--world", world_spec,
         "--json", "-p", "nap"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert chat.stdout is not None
        sid = json.loads(chat.stdout.readline())["sessionId"]
        for line in chat.stdout:  # the chat waits through the sleep: it is killed in it
            if json.loads(line).get("type") == "turn.waiting":
                break
        chat.kill()
    finally:
        chat.wait(WAIT)
        if chat.stdout is not None:
            chat.stdout.close()
    due = dt.datetime.fromisoformat(str(view(server, sid)["wakeAt"])).timestamp()
    assert eventually(lambda: view(server, sid)["status"] == "waiting")
    # Woken by the running server within a few seconds of its time (it reads every timer
    # only each 30 s, unless told of a new one); generous for a loaded machine.
    assert time.time() - due < 5.0, time.time() - due
    assert tool_result(server, sid).startswith("Slept ")
