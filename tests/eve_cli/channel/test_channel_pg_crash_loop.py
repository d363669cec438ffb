"""A PostgreSQL crash loop: two `eve start` workers and concurrent clients while the database
server of the test's own cluster is killed (`pg_ctl stop -m immediate`) ten times. A checker
then holds the store to what was acknowledged: no acknowledged message lost, none received
twice, no tool call run again after it completed, no hole in any session's events, every
session readable and driven to its end, and no idempotency key given to two different calls."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    eventually,
    reply,
    write_agent,
    write_script,
)
from tests.pg_support import throwaway_cluster, with_params

# Kills the database server again and again: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

API = "/eve/v1"
CRASHES = 10
SESSIONS = 4
TURNS = 200  # more than the clients send during the loop: every turn has its script entries
TOOLS = '''
from pathlib import Path
from eve_cli import ToolContext, tool

@tool
def note(text: str, ctx: ToolContext) -> str:
    """Note a line (counts real executions, with the call's idempotency key)."""
    with open(Path(__file__).parent.parent / "runs.txt", "a") as f:
        f.write(f"{ctx.session_id} {ctx.idempotency_key} {text}\\n")
    return "noted " + text
'''


@pytest.fixture
def cluster() -> Iterator[tuple[str, Callable[..., None]]]:
    with throwaway_cluster() as found:
        yield found


class _Client(threading.Thread):
    """Sends one session numbered messages, each once (a failed send is never repeated: its
    text is counted as unacknowledged), alternating between the workers."""

    def __init__(self, urls: list[str], sid: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.urls, self.sid, self.stop = urls, sid, stop
        self.acked: list[str] = []
        self.unacked: list[str] = []

    def run(self) -> None:
        n = 0
        with httpx.Client(timeout=10.0) as client:
            while not self.stop.is_set():
                text = f"{self.sid} m{n}"
                try:
                    answer = client.post(
                        f"{self.urls[n % 2]}{API}/session/{self.sid}",
                        json={"message": text, "turnPolicy": "queue"},
                    )
                    ok = answer.status_code == 202
                except httpx.HTTPError:
                    ok = False
                (self.acked if ok else self.unacked).append(text)
                n += 1
                time.sleep(0.3)


def _events(url: str, sid: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}{API}/session/{sid}/stream", params={"follow": "false"}, timeout=WAIT)
    assert answer.status_code == 200, answer.text
    return [json.loads(line) for line in answer.text.splitlines() if line.strip()]


def test_ten_database_crashes_under_two_workers_lose_and_repeat_nothing(
    eve_process: Callable[..., EveProcess],
    tmp_path: Path,
    cluster: tuple[str, Callable[..., None]],
) -> None:
    server, restart = cluster
    url = with_params(server, lease="1.5")
    script: list[dict[str, Any]] = []
    for t in range(TURNS):
        script += [call("note", text=f"t{t}"), reply(f"done t{t}")]
    agent = write_agent(tmp_path / "agent", write_script(tmp_path / "s.json", script), TOOLS)
    workers = [
        eve_process("start", "--port", "0", "--agent", str(agent), "--world", url) for _ in range(2)
    ]
    urls = [w.url for w in workers]
    sids = [
        httpx.post(f"{urls[n % 2]}{API}/session", json={}, timeout=WAIT).json()["sessionId"]
        for n in range(SESSIONS)
    ]
    stop = threading.Event()
    clients = [_Client(urls, sid, stop) for sid in sids]
    for client in clients:
        client.start()
    try:
        for _ in range(CRASHES):
            time.sleep(1.0)
            restart(0.3, "immediate")
    finally:
        time.sleep(1.0)
        stop.set()
        for client in clients:
            client.join(WAIT)
    assert sum(len(c.acked) for c in clients) >= 2 * CRASHES  # the loop really served

    _check(urls, clients, agent / "runs.txt")
    for worker in workers:
        assert worker.proc.poll() is None
        assert "Traceback" not in "\n".join(worker.stderr_lines)


def _check(urls: list[str], clients: list[_Client], runs_file: Path) -> None:
    """What the store must hold after the loop (see the module's docstring)."""

    def received(client: _Client) -> list[str]:
        events = _events(urls[0], client.sid)
        return [str(e.get("text")) for e in events if e["type"] == "message.received"]

    def caught_up(client: _Client) -> Callable[[], bool]:
        return lambda: set(client.acked) <= set(received(client))

    for client in clients:  # driven to the end: every acknowledged message received
        assert eventually(caught_up(client), timeout=120.0), client.sid
    runs: Counter[str] = Counter()
    keys: dict[str, str] = {}
    for line in runs_file.read_text().splitlines():
        sid, key, text = line.split(" ", 2)
        runs[key] += 1
        assert keys.setdefault(key, f"{sid} {text}") == f"{sid} {text}", line  # one key, one call
    assert [key for key, count in runs.items() if count > 1] == []  # no tool call run again
    for client in clients:
        events = _events(urls[1], client.sid)
        assert [e["index"] for e in events] == list(range(len(events)))  # no hole
        texts = [str(e.get("text")) for e in events if e["type"] == "message.received"]
        assert [t for t, n in Counter(texts).items() if n > 1] == []  # none received twice
        assert set(texts) <= set(client.acked) | set(client.unacked)
        view = httpx.get(f"{urls[1]}{API}/session/{client.sid}", timeout=WAIT)
        assert view.status_code == 200, view.text
