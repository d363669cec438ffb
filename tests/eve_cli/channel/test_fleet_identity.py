"""Workers of one PostgreSQL store share one store id (SPEC §17), checked with real `eve start`
processes on a real PostgreSQL: each worker advertises itself in the store while it serves
(`GET /eve/v1/info` lists the live ones) and remembers the store it joined in its agent folder;
a worker refuses, in one line, to join a database recreated under a running fleet (its peers
advertise another store) or another database than its deployment last joined, unless told the
store to join (`--store-id`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from eve_cli.cli._fleet import JOINED
from tests.eve_cli.channel.channel_support import WAIT, EveProcess, reply, write_agent, write_script
from tests.pg_support import fresh_schema, require_server, server_url
from world import PostgresWorld, store_identity

pytestmark = pytest.mark.slow  # real `eve start` processes, several per test

API = "/eve/v1"


@pytest.fixture
def pg_url() -> Iterator[str]:
    require_server()
    with fresh_schema() as url:
        yield url


def _agent(folder: Path) -> Path:
    folder.parent.mkdir(parents=True, exist_ok=True)
    return write_agent(folder, write_script(folder.parent / f"{folder.name}.json", [reply("hi")]))


def _start(*args: str) -> subprocess.CompletedProcess[str]:
    """An `eve start` expected to refuse (it exits at once)."""
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", "start", "--port", "0", *args], capture_output=True,
        text=True, timeout=WAIT, env=dict(os.environ),
    )  # fmt: skip


def _refused(done: subprocess.CompletedProcess[str], *said: str) -> str:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for part in said:
        assert part in lines[0], lines[0]
    return lines[0]


def _peers(server: EveProcess) -> list[dict[str, object]]:
    info = httpx.get(f"{server.url}{API}/info", timeout=WAIT).json()
    return list(info["peers"])


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&")[0]


def _store_of(url: str) -> str:
    world = PostgresWorld(url)
    try:
        found = store_identity(world).id
    finally:
        world.close()
    assert found
    return found


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_live_workers_are_listed_and_a_stopped_one_leaves(
    eve_process: Callable[..., EveProcess], pg_url: str, tmp_path: Path
) -> None:
    one, two = _agent(tmp_path / "one" / "agent"), _agent(tmp_path / "two" / "agent")
    a = eve_process("start", "--port", "0", "--agent", str(one), "--world", pg_url)
    b = eve_process("start", "--port", "0", "--agent", str(two), "--world", pg_url)
    store = _store_of(pg_url)
    _until(lambda: len(_peers(a)) == 2)
    peers = {p["pid"]: p for p in _peers(a)}
    assert set(peers) == {a.proc.pid, b.proc.pid}
    for pid, peer in peers.items():
        assert peer["storeId"] == store and peer["agent"] == "t" and peer["version"]
        assert peer["host"] and peer["worker"] and peer["lastSeen"]
        assert peer["self"] is (pid == a.proc.pid)
    assert [p["self"] for p in _peers(b) if p["pid"] == b.proc.pid] == [True]
    for folder in (one, two):  # each deployment remembers the store it joined
        assert json.loads((folder / JOINED).read_text())["storeId"] == store
        subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
        ignored = subprocess.run(["git", "check-ignore", "-q", str(JOINED)], cwd=folder)
        assert ignored.returncode == 0  # this host's: never committed with the agent's code

    b.signal(signal.SIGTERM)
    assert b.wait() == 0
    assert [p["pid"] for p in _peers(a)] == [a.proc.pid]  # withdrawn as it stopped
    # A worker killed outright is listed until it is not heard of for a while.
    a2 = eve_process("start", "--port", "0", "--agent", str(two), "--world", pg_url)
    _until(lambda: len(_peers(a)) == 2)
    a2.signal(signal.SIGKILL)
    a2.wait()
    _until(lambda: [p["pid"] for p in _peers(a)] == [a.proc.pid])


def test_a_database_recreated_under_a_running_fleet_is_not_joined(
    eve_process: Callable[..., EveProcess], pg_url: str, tmp_path: Path
) -> None:
    first = _agent(tmp_path / "a")
    a = eve_process("start", "--port", "0", "--agent", str(first), "--world", pg_url)
    joined = _store_of(pg_url)
    schema = _schema(pg_url)
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    recreated = _store_of(pg_url)  # made again, empty: another store
    assert recreated != joined

    def advertised() -> bool:  # the running worker goes on saying which store it joined
        with psycopg.connect(server_url(), autocommit=True) as conn:
            row = conn.execute(f'SELECT facts FROM "{schema}".members').fetchone()
        return row is not None and row[0]["storeId"] == joined

    _until(advertised)
    newcomer = _agent(tmp_path / "c")  # a deployment that never joined anything
    line = _refused(_start("--agent", str(newcomer), "--world", pg_url), joined, recreated,
                    f"--store-id {recreated}")  # fmt: skip
    assert "live workers" in line
    assert not (newcomer / JOINED).exists()
    ready = httpx.get(f"{a.url}{API}/ready", timeout=WAIT)
    assert ready.status_code == 503 and ready.json()["problems"] == ["store changed"]

    # Told the store to join, it joins; the fleet's listing shows both stores' workers.
    c = eve_process("start", "--port", "0", "--agent", str(newcomer), "--world", pg_url,
                    "--store-id", recreated)  # fmt: skip
    _until(lambda: len(_peers(c)) == 2)
    assert {p["pid"]: p["storeId"] for p in _peers(c)} == {
        a.proc.pid: joined, c.proc.pid: recreated}  # fmt: skip
    assert json.loads((newcomer / JOINED).read_text())["storeId"] == recreated
    # The running worker, restarted, does not join the store that replaced its own.
    a.signal(signal.SIGTERM)
    assert a.wait() == 0
    line = _refused(_start("--agent", str(first), "--world", pg_url), joined, recreated)
    assert "last joined" in line


def test_a_worker_pointed_at_another_database_refuses(
    eve_process: Callable[..., EveProcess], pg_url: str, tmp_path: Path
) -> None:
    agent = _agent(tmp_path / "agent")
    first = eve_process("start", "--port", "0", "--agent", str(agent), "--world", pg_url)
    store = _store_of(pg_url)
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    with fresh_schema() as other:
        elsewhere = _store_of(other)
        line = _refused(_start("--agent", str(agent), "--world", other), store, elsewhere,
                        f"--store-id {elsewhere}", str(agent))  # fmt: skip
        assert "last joined" in line
        assert json.loads((agent / JOINED).read_text())["storeId"] == store  # unchanged
        # Moved on purpose: told the store, it joins, and remembers the new one.
        moved = eve_process("start", "--port", "0", "--agent", str(agent), "--world", other,
                            "--store-id", elsewhere)  # fmt: skip
        moved.signal(signal.SIGTERM)
        assert moved.wait() == 0
        assert json.loads((agent / JOINED).read_text())["storeId"] == elsewhere
        _refused(_start("--agent", str(agent), "--world", pg_url), elsewhere, store)
    with fresh_schema() as empty:  # a database with no eve store: none is made there
        line = _refused(_start("--agent", str(agent), "--world", empty), elsewhere,
                        "has no eve store", str(agent / JOINED))  # fmt: skip
        with psycopg.connect(server_url(), autocommit=True) as conn:
            assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                                [_schema(empty)]).fetchone() is None  # fmt: skip
        fresh = _agent(tmp_path / "fresh")  # a deployment that joined nothing makes it
        made = eve_process("start", "--port", "0", "--agent", str(fresh), "--world", empty)
        assert _peers(made)[0]["storeId"] == _store_of(empty)
        made.close()
    # The store it joined, as before: it starts without being told.
    again = eve_process("start", "--port", "0", "--agent", str(agent), "--world", pg_url,
                        "--store-id", store)  # fmt: skip
    again.close()
    plain = eve_process("start", "--port", "0", "--agent", str(agent), "--world", pg_url)
    assert _peers(plain)[0]["storeId"] == store
