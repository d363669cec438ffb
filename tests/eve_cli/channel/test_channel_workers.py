"""Many `eve start` workers on one PostgreSQL world (real processes on different ports): any
worker serves any session and tails events another writes; a worker killed with SIGKILL mid-turn
is taken over by a survivor within 2 s, its finished actions not repeated; a worker frozen with
SIGSTOP past its lease loses its sessions and, woken, can write nothing to them (fencing)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)
from tests.pg_support import fresh_schema, require_server

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

API = "/eve/v1"
JSON = {"content-type": "application/json"}

COUNTING_TOOLS = """
from pathlib import Path
from eve_cli import tool

@tool
def note(text: str) -> str:
    \"\"\"Append a line to a file (counts real executions).\"\"\"
    with open(Path(__file__).parent.parent / "runs.txt", "a") as f:
        f.write(text + "\\n")
    return "noted " + text
"""


@pytest.fixture
def world_url() -> Iterator[str]:
    with fresh_schema(lease="1.5") as url:  # a frozen worker's sessions wait 1.5 s
        yield url


def _agent(tmp_path: Path, pause: float) -> Path:
    # Step 1 runs a tool; step 2's model call streams a first delta, then pauses.
    script = write_script(
        tmp_path / "s.json",
        [
            call("note", text="once"),
            reply("the final answer after the pause", delay=pause),
            reply("and the answer to what came meanwhile"),
        ],
    )
    return write_agent(tmp_path / "agent", script, COUNTING_TOOLS)


def _worker(eve_process: Callable[..., EveProcess], agent: Path, url: str) -> EveProcess:
    return eve_process("start", "--port", "0", "--agent", str(agent), "--world", url)


def _start_turn(
    eve_process: Callable[..., EveProcess], agent: Path, url: str
) -> tuple[EveProcess, EveProcess, str]:
    """A session created on a first worker, which drives it; once step 2's model call
    streams, a second worker (which then leaves it to the first, alive, to drive)."""
    first = _worker(eve_process, agent, url)
    sid = httpx.post(
        f"{first.url}{API}/session", json={"message": "go"}, headers=JSON, timeout=WAIT
    ).json()["sessionId"]
    streaming = read_events(
        first.url, sid, lambda e: e["type"] == "message.appended" and e.get("stepIndex", 0) >= 1
    )
    second = _worker(eve_process, agent, url)
    # The second replays what the first wrote, from the database.
    assert read_events(second.url, sid, lambda e: e["index"] >= len(streaming) - 1) == streaming
    return first, second, sid


def _owner(url: str, sid: str) -> str | None:
    """Which worker holds the session's lease now (None: no one)."""
    schema = url.split("schema=", 1)[1].split("&")[0]
    with psycopg.connect(require_server(), autocommit=True) as conn:
        row = conn.execute(
            f'SELECT owner, lease_until > now() FROM "{schema}".families WHERE root = %s', [sid]
        ).fetchone()
    return str(row[0]) if row and row[0] and row[1] else None


def _finished_once(url: str, sid: str, agent: Path) -> list[dict[str, Any]]:
    events = read_events(url, sid, settled())
    assert [e["type"] for e in events].count("turn.completed") == 1
    texts = [e.get("text") for e in events if e["type"] == "message.completed"]
    assert texts[-1] == "the final answer after the pause" and texts.count(texts[-1]) == 1
    assert (agent / "runs.txt").read_text().splitlines() == ["once"]  # the tool ran once
    assert [e["index"] for e in events] == list(range(len(events)))  # nothing forked
    return events


def test_a_killed_worker_is_taken_over_within_two_seconds(
    eve_process: Callable[..., EveProcess], tmp_path: Path, world_url: str
) -> None:
    agent = _agent(tmp_path, pause=8.0)  # killed in the pause; the survivor runs it again
    first, second, sid = _start_turn(eve_process, agent, world_url)
    owner = _owner(world_url, sid)
    assert owner is not None  # the first drives it
    first.signal(signal.SIGKILL)
    killed = time.monotonic()
    while (now := _owner(world_url, sid)) in (owner, None) and time.monotonic() - killed < WAIT:
        time.sleep(0.01)
    took = time.monotonic() - killed
    assert now not in (owner, None) and took < 2.0, f"taken over after {took:.2f}s"
    _finished_once(second.url, sid, agent)
    second.stderr_until(f"took over session {sid}")


def test_a_frozen_worker_loses_its_sessions_and_cannot_write_when_woken(
    eve_process: Callable[..., EveProcess], tmp_path: Path, world_url: str
) -> None:
    agent = _agent(tmp_path, pause=8.0)  # the frozen worker wakes inside this call
    first, second, sid = _start_turn(eve_process, agent, world_url)
    first.signal(signal.SIGSTOP)
    try:
        events = _finished_once(second.url, sid, agent)  # after the 1.5 s lease and the pause
    finally:
        first.signal(signal.SIGCONT)
    first.stderr_until(f"session {sid}: .*taken over")
    time.sleep(0.5)  # whatever the woken worker would still write
    again = read_events(second.url, sid, settled())
    assert again == events  # nothing written by the woken worker: no duplicate, no fork
    status = httpx.get(f"{first.url}{API}/session/{sid}", timeout=WAIT).json()["status"]
    assert status == "waiting"  # and it serves the session as the survivor left it


def test_every_worker_stalled_past_its_lease_at_once_loses_and_repeats_nothing(
    eve_process: Callable[..., EveProcess], tmp_path: Path, world_url: str
) -> None:
    """Both workers frozen (SIGSTOP) for longer than a lease, inside the turn's model call,
    then woken together: each finds every lease lapsed at once; the session is finished by
    one of them, once, its tool not run again, its events whole."""
    agent = _agent(tmp_path, pause=3.0)
    first, second, sid = _start_turn(eve_process, agent, world_url)
    for worker in (first, second):
        worker.signal(signal.SIGSTOP)
    time.sleep(4.0)  # more than twice the 1.5 s lease
    for worker in (first, second):
        worker.signal(signal.SIGCONT)
    events = _finished_once(second.url, sid, agent)
    time.sleep(0.5)  # whatever a worker that lost the race would still write
    assert read_events(first.url, sid, settled()) == events
    for worker in (first, second):
        assert worker.proc.poll() is None
        assert "Traceback" not in "\n".join(worker.stderr_lines)


def test_a_delivery_to_another_worker_reaches_the_driving_one(
    eve_process: Callable[..., EveProcess], tmp_path: Path, world_url: str
) -> None:
    agent = _agent(tmp_path, pause=8.0)
    first, second, sid = _start_turn(eve_process, agent, world_url)
    receipt = httpx.post(
        f"{second.url}{API}/session/{sid}",
        json={"message": "also this"},
        headers=JSON,
        timeout=WAIT,
    ).json()
    assert receipt["disposition"] in ("steered", "queued")
    # Read from the second worker, which drives nothing: it replays, then tails live what the
    # first one writes when it takes the message at its next step.
    events = read_events(
        second.url,
        sid,
        lambda e: e["type"] == "message.received" and e.get("text") == "also this",
    )
    received = [e.get("text") for e in events if e["type"] == "message.received"]
    assert received == ["go", "also this"]  # once each: not lost, not driven twice
    assert read_events(first.url, sid, lambda e: e["index"] >= len(events) - 1) == events


def test_a_drained_worker_hands_its_session_over_at_once(
    eve_process: Callable[..., EveProcess], tmp_path: Path, world_url: str
) -> None:
    """SIGTERM: the worker stops accepting, gives the step in flight `--drain-timeout`, exits
    releasing its lease, and a survivor takes the session over without waiting for the lease
    to lapse; the finished tool call is not repeated, and a message sent during the drain is
    answered."""
    agent = _agent(tmp_path, pause=8.0)  # the drain stops the first worker inside this call
    first = eve_process(
        "start", "--port", "0", "--agent", str(agent), "--world", world_url,
        "--drain-timeout", "0.5",
    )  # fmt: skip
    created = httpx.post(
        f"{first.url}{API}/session", json={"message": "go"}, headers=JSON, timeout=WAIT
    )
    assert created.status_code == 202, (created.text, first.stderr_lines)
    sid = created.json()["sessionId"]
    read_events(
        first.url, sid, lambda e: e["type"] == "message.appended" and e.get("stepIndex", 0) >= 1
    )
    second = _worker(eve_process, agent, world_url)
    owner = _owner(world_url, sid)
    assert owner is not None
    first.signal(signal.SIGTERM)
    receipt = httpx.post(
        f"{second.url}{API}/session/{sid}", json={"message": "meanwhile"}, headers=JSON,
        timeout=WAIT,
    )  # fmt: skip
    assert receipt.status_code == 202, receipt.text
    assert first.wait() == 0
    drained = time.monotonic()
    while (now := _owner(world_url, sid)) in (owner, None) and time.monotonic() - drained < WAIT:
        time.sleep(0.01)
    took = time.monotonic() - drained
    assert now not in (owner, None) and took < 1.0, f"taken over {took:.2f}s after the drain"
    events = read_events(second.url, sid, settled())
    texts = [e.get("text") for e in events if e["type"] == "message.completed"]
    assert "the final answer after the pause" in texts
    assert "meanwhile" in [e.get("text") for e in events if e["type"] == "message.received"]
    assert (agent / "runs.txt").read_text().splitlines() == ["once"]  # the tool ran once
