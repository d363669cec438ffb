"""`eve gc` on PostgreSQL racing live sessions (real processes): one `eve start` worker, clients
delivering to sessions left idle about as long as gc's threshold, and `eve gc --waiting
--older-than 1s` run over and over meanwhile. A delivery the server acknowledged (202) is
always taken by its session (`message.received`) before gc may remove it; a delivery to a
removed session is a 404; nothing is a 5xx."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.channel.channel_support import EveProcess
from tests.eve_cli.rt_support import reply, write_agent
from tests.pg_support import fresh_schema
from world import open_world

API = "/eve/v1"
RACE = 30.0  # seconds of racing


class _Race:
    """Clients delivering to sessions, and gc, until ``stop`` (a monotonic time)."""

    def __init__(self, client: httpx.Client, reader: Runtime, url: str, stop: float) -> None:
        self.client, self.reader, self.url, self.stop = client, reader, url, stop
        self.lock = threading.Lock()
        self.codes: Counter[int] = Counter()
        self.untaken: list[str] = []
        self.gc_runs: list[subprocess.CompletedProcess[str]] = []

    def taken(self, sid: str, text: str) -> bool | None:
        """True once the session took ``text``; False if it was removed without."""
        with self.lock:
            events, exists = self.reader.events(sid), bool(self.reader.world.heads(roots=[sid]))
        if any(e["type"] == "message.received" and e.get("text") == text for e in events):
            return True
        return None if exists else False

    def deliver(self, sid: str) -> None:
        rng, k = random.Random(sid), 0
        while time.monotonic() < self.stop:
            time.sleep(rng.choice([0.05, 0.8, 1.0, 1.2, 2.0]))  # about gc's threshold
            k += 1
            text = f"{sid}-{k}"
            answer = self.client.post(f"/session/{sid}", json={"message": text})
            self.codes[answer.status_code] += 1
            if answer.status_code == 202 and not self.followed(sid, text):
                self.untaken.append(text)

    def followed(self, sid: str, text: str) -> bool:
        deadline = time.monotonic() + 30
        while (verdict := self.taken(sid, text)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return verdict is True

    def collect(self) -> None:
        while time.monotonic() < self.stop:
            self.gc_runs.append(subprocess.run(
                [sys.executable, "-m", "eve_cli", "gc", "--world", self.url, "--older-than",
                 "1s", "--waiting", "--json"],
                capture_output=True, text=True, timeout=120,
            ))  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gc_never_removes_a_session_before_it_took_an_acknowledged_delivery(
    tmp_path: Path, eve_process: Callable[..., EveProcess]
) -> None:
    agent = write_agent(tmp_path / "agent", script=[reply(f"r{i}") for i in range(2000)])
    with fresh_schema() as url:
        worker = eve_process("start", "--port", "0", "--agent", str(agent), "--world", url)
        client = httpx.Client(base_url=worker.url + API, timeout=60)
        sids = [client.post("/session", json={"message": "hi"}).json()["sessionId"]
                for _ in range(4)]  # fmt: skip
        reader = Runtime(agent_dir=agent, world=open_world(url))
        race = _Race(client, reader, url, time.monotonic() + RACE)
        threads = [threading.Thread(target=race.deliver, args=(sid,)) for sid in sids]
        threads.append(threading.Thread(target=race.collect))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        reader.close()
        client.close()
        worker.signal(15)
        worker.wait()
    assert race.untaken == [], race.untaken
    assert set(race.codes) <= {202, 404}, race.codes
    assert race.codes[202] > 0 and len(race.gc_runs) >= 2
    assert all(run.returncode == 0 for run in race.gc_runs), [r.stderr for r in race.gc_runs]
    removed = sum(run.stdout.count('"removed"') for run in race.gc_runs)
    assert removed > 0, [run.stdout for run in race.gc_runs][:3]  # gc removed some: a race
    assert not [line for line in worker.stderr_lines if "Traceback" in line]
