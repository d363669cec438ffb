"""The same `operationId` sent to two `eve start` workers at once (real processes on one
PostgreSQL world, and two processes on one local data folder): both answer with the same
session, exactly one says it created it, and the message is received exactly once."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)

# Real processes racing: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

API = "/eve/v1"
TRIALS = 20


@pytest.fixture
def world(world_spec: str) -> str:
    """Where the sessions live (a data directory, or a PostgreSQL schema), by the name these
    tests use: the shared `world_spec`."""
    return world_spec


def _both_at_once(urls: list[str], body: dict[str, Any]) -> list[httpx.Response]:
    """POST ``body`` to every worker at the same moment."""
    gate = threading.Barrier(len(urls))
    answers: list[httpx.Response | None] = [None] * len(urls)

    def post(n: int) -> None:
        with httpx.Client(timeout=WAIT) as client:
            gate.wait()
            answers[n] = client.post(f"{urls[n]}{API}/session", json=body)

    threads = [threading.Thread(target=post, args=(n,)) for n in range(len(urls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert all(a is not None for a in answers)
    return [a for a in answers if a is not None]


def _received(url: str, sid: str) -> list[str]:
    stream = httpx.get(
        f"{url}{API}/session/{sid}/stream", params={"follow": "false"}, timeout=WAIT
    ).text
    events = [json.loads(line) for line in stream.splitlines() if line.strip()]
    return [str(e.get("text")) for e in events if e["type"] == "message.received"]


def test_one_operation_on_two_workers_at_once_is_one_session_and_one_message(
    eve_process: Callable[..., EveProcess], tmp_path: Path, world: str
) -> None:
    script = write_script(tmp_path / "s.json", [reply("done")])
    agent = write_agent(tmp_path / "agent", script)
    workers = [
        eve_process("start", "--port", "0", "--agent", str(agent), "--world", world)
        for _ in range(2)
    ]
    urls = [w.url for w in workers]
    sessions: dict[str, str] = {}
    for trial in range(TRIALS):
        message = f"trial {trial}"
        answers = _both_at_once(urls, {"message": message, "operationId": f"op-{trial}"})
        assert [a.status_code for a in answers] == [202, 202], [a.text for a in answers]
        bodies = [a.json() for a in answers]
        assert bodies[0]["sessionId"] == bodies[1]["sessionId"], bodies
        assert sorted(b["created"] for b in bodies) == [False, True], bodies
        sessions[bodies[0]["sessionId"]] = message
    for n, (sid, message) in enumerate(sessions.items()):
        url = urls[n % 2]
        read_events(url, sid, settled())
        assert _received(url, sid) == [message], sid
    for worker in workers:
        assert worker.proc.poll() is None
        assert not [line for line in worker.stderr_lines if "Traceback" in line]
