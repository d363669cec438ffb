"""The database restarted under running `eve start` workers, in a PostgreSQL cluster of the
test's own (the shared server is not touched): the workers reconnect by themselves, the turn
in flight completes with nothing lost and no finished action run again, each worker says in
one line that the database is away and in one that it is back, and both serve new turns."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    eventually,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)
from tests.eve_cli.channel.test_channel_workers import API, COUNTING_TOOLS, JSON
from tests.pg_support import throwaway_cluster, with_params

RETRY = 3.0  # seconds the worker's world retries a call before it gives up (`?retry=`)

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

DOWN = 1.5  # seconds the database stays stopped


@pytest.fixture
def cluster() -> Iterator[tuple[str, Callable[[float], None]]]:
    with throwaway_cluster() as found:
        yield found


def test_workers_ride_out_a_database_restart(
    eve_process: Callable[..., EveProcess],
    tmp_path: Path,
    cluster: tuple[str, Callable[[float], None]],
) -> None:
    server, restart = cluster
    url = with_params(server, lease="1.5")
    script = write_script(
        tmp_path / "s.json",
        [
            call("note", text="one"),
            {**call("note", text="two"), "delay": 4.0},  # the database restarts meanwhile
            reply("done"),
            reply("and the next turn"),
        ],
    )
    agent = write_agent(tmp_path / "agent", script, COUNTING_TOOLS)
    runs = agent / "runs.txt"
    workers = [
        eve_process("start", "--port", "0", "--agent", str(agent), "--world", url) for _ in range(2)
    ]
    sid = httpx.post(
        f"{workers[0].url}{API}/session", json={"message": "go"}, headers=JSON, timeout=WAIT
    ).json()["sessionId"]
    assert eventually(lambda: runs.exists() and runs.read_text() == "one\n")
    restart(DOWN)
    for worker in workers:
        worker.stderr_until("PostgreSQL at .* is unreachable")
        worker.stderr_until("PostgreSQL at .* answers again")
    events = read_events(workers[1].url, sid, settled())
    assert [e["type"] for e in events].count("turn.completed") == 1
    assert runs.read_text().splitlines() == ["one", "two"]  # each tool once: none repeated
    assert [e["index"] for e in events] == list(range(len(events)))  # nothing lost or forked
    receipt = httpx.post(
        f"{workers[1].url}{API}/session/{sid}", json={"message": "again"}, headers=JSON,
        timeout=WAIT,
    ).json()  # fmt: skip
    assert receipt["disposition"] == "started"
    after = events[-1]["index"]
    again = read_events(
        workers[0].url, sid, lambda e: e["type"] == "turn.completed" and e["index"] > after
    )
    assert [e["type"] for e in again].count("turn.completed") == 2
    for worker in workers:  # one line while it was down, one when it was back: no flood
        lines = [line for line in worker.stderr_lines if "PostgreSQL at" in line]
        assert len(lines) == 2, worker.stderr_lines
        assert "Traceback" not in "\n".join(worker.stderr_lines)


def test_a_delivery_while_the_database_is_away_is_a_503_to_retry(
    eve_process: Callable[..., EveProcess],
    tmp_path: Path,
    cluster: tuple[str, Callable[[float], None]],
) -> None:
    """Longer away than a call retries (`?retry=`): the delivery is answered 503 with Retry-After
    and one log line, never a 507 saying storage refused it; the retry once the database is
    back is received once."""
    server, restart = cluster
    script = write_script(tmp_path / "s.json", [reply("first"), reply("second")])
    worker = eve_process(
        "start", "--port", "0", "--agent", str(write_agent(tmp_path / "agent", script)),
        "--world", with_params(server, lease="1.5", retry=str(RETRY)),
    )  # fmt: skip
    sid = httpx.post(
        f"{worker.url}{API}/session", json={"message": "one"}, headers=JSON, timeout=WAIT
    ).json()["sessionId"]
    first = read_events(worker.url, sid, settled())
    away = threading.Thread(target=restart, args=(4 * RETRY,))
    away.start()
    try:
        worker.stderr_until("PostgreSQL at .* is unreachable")
        refused = httpx.post(
            f"{worker.url}{API}/session/{sid}", json={"message": "two"}, headers=JSON,
            timeout=3 * RETRY,
        )  # fmt: skip
    finally:
        away.join()
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "unavailable"
    assert "retry" in refused.json()["error"]["message"]
    worker.stderr_until("PostgreSQL at .* answers again")
    retried = httpx.post(
        f"{worker.url}{API}/session/{sid}", json={"message": "two"}, headers=JSON, timeout=WAIT
    )
    assert retried.status_code == 202, retried.text
    events = first + read_events(worker.url, sid, settled(), start=first[-1]["index"] + 1)
    assert [e["text"] for e in events if e["type"] == "message.received"] == ["one", "two"]
    assert "Traceback" not in "\n".join(worker.stderr_lines)
