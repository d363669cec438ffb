"""A session belongs to its agent's name, not to the folder it was made in (real processes):
a renamed or re-cloned folder, a release symlink switched with the old release deleted (in a
data directory and in PostgreSQL), two PostgreSQL workers whose checkouts sit at different
paths all continue it; a folder of another
agent is refused in one line naming both; a server that cannot run a session's agent rejects
its delivery (409, logged) instead of starting a turn that fails."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

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
from tests.pg_support import fresh_schema, require_server

# Real `eve` processes, several per test: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

API = "/eve/v1"


def _agent(folder: Path, script: Path, name: str = "t") -> Path:
    write_agent(folder, script)
    (folder / "agent.py").write_text(
        "from eve_cli import define_agent\n\n"
        f"agent = define_agent(model={f'scripted:{script}'!r}, name={name!r},"
        " instructions='You are a test agent.')\n"
    )
    return folder


def _eve(data: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVE_DATA_DIR": str(data)}
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", *args], capture_output=True, text=True, env=env,
        cwd=cwd, timeout=60,
    )  # fmt: skip


def _sid(done: subprocess.CompletedProcess[str]) -> str:
    """The session id of a `--json` chat."""
    for line in done.stdout.splitlines():
        event = json.loads(line)
        if event.get("sessionId"):
            return str(event["sessionId"])
    raise AssertionError(done.stdout + done.stderr)


def _replies(done: subprocess.CompletedProcess[str]) -> list[str]:
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [str(e.get("text")) for e in events if e.get("type") == "message.completed"]


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return write_script(tmp_path / "s.json", [reply(f"answer {n}") for n in range(6)])


@pytest.fixture
def world(world_spec: str) -> str:
    """Where the sessions live (a data directory, or a PostgreSQL schema), by the name these
    tests use: the shared `world_spec`."""
    return world_spec


def test_a_renamed_folder_and_a_clone_elsewhere_continue_the_session(
    tmp_path: Path, script: Path, world: str
) -> None:
    data = tmp_path / "unused"  # every call names --world
    first = _eve(data, "chat", "--world", world, "--agent", str(_agent(tmp_path / "a1", script)),
                 "--json", "-p", "hi")  # fmt: skip
    assert first.returncode == 0, first.stderr
    sid = _sid(first)
    (tmp_path / "a1").rename(tmp_path / "a2")
    moved = _eve(data, "chat", "--world", world, "-s", sid, "--agent", str(tmp_path / "a2"),
                 "--json", "-p", "on")  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert _replies(moved) == ["answer 1"]
    assert _digest(moved) == _digest(first)  # the same code, wherever it sits
    # A clone at another path, found as ./agent of the working directory.
    project = tmp_path / "clone"
    shutil.copytree(tmp_path / "a2", project / "agent")
    shutil.rmtree(tmp_path / "a2")
    cloned = _eve(data, "chat", "--world", world, "-s", sid, "--json", "-p", "again", cwd=project)
    assert cloned.returncode == 0, cloned.stderr
    assert _replies(cloned) == ["answer 2"]


def test_a_folder_of_another_agent_is_refused_naming_both(tmp_path: Path, script: Path) -> None:
    data = tmp_path / "data"
    first = _eve(
        data, "chat", "--agent", str(_agent(tmp_path / "a1", script)), "--json", "-p", "hi"
    )
    sid = _sid(first)
    other = _agent(tmp_path / "other", script, name="u")
    refused = _eve(data, "chat", "-s", sid, "--agent", str(other), "-p", "on")
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "'u'" in lines[0] and "'t'" in lines[0], refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_release_switch_with_the_old_release_deleted_continues_the_session(
    eve_process: Callable[..., EveProcess], tmp_path: Path, script: Path, world: str
) -> None:
    data = world
    r1 = _agent(tmp_path / "releases" / "r1", script)
    current = tmp_path / "current"
    current.symlink_to(r1)
    server = eve_process("start", "--port", "0", "--agent", str(current), "--world", data)
    sid = httpx.post(f"{server.url}{API}/session", json={"message": "hi"}, timeout=WAIT).json()[
        "sessionId"
    ]
    first = read_events(server.url, sid, settled())
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(WAIT) == 0
    shutil.copytree(r1, tmp_path / "releases" / "r2")
    current.unlink()
    current.symlink_to(tmp_path / "releases" / "r2")
    shutil.rmtree(r1)
    server = eve_process("start", "--port", "0", "--agent", str(current), "--world", data)
    sent = httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "on"}, timeout=WAIT)
    assert sent.status_code == 202 and sent.json()["disposition"] == "started", sent.text
    events = read_events(server.url, sid, settled(), start=first[-1]["index"] + 1)
    assert [e["type"] for e in events].count("turn.completed") == 1
    assert [e["text"] for e in events if e["type"] == "message.completed"] == ["answer 1"]


@pytest.fixture
def pg_url() -> Iterator[str]:
    require_server()
    with fresh_schema(lease="1.5") as url:
        yield url


def test_two_workers_with_checkouts_at_different_paths_serve_one_session(
    eve_process: Callable[..., EveProcess], tmp_path: Path, script: Path, pg_url: str
) -> None:
    here = _agent(tmp_path / "host-a" / "agent", script)
    there = _agent(tmp_path / "host-b" / "srv" / "agent", script)
    a = eve_process("start", "--port", "0", "--agent", str(here), "--world", pg_url)
    b = eve_process("start", "--port", "0", "--agent", str(there), "--world", pg_url)
    sid = httpx.post(f"{a.url}{API}/session", json={"message": "hi"}, timeout=WAIT).json()[
        "sessionId"
    ]
    first = read_events(a.url, sid, settled())
    a.proc.kill()  # worker a is gone (and its checkout with it): b serves the session
    shutil.rmtree(tmp_path / "host-a")
    sent = httpx.post(f"{b.url}{API}/session/{sid}", json={"message": "on"}, timeout=WAIT)
    assert sent.status_code == 202, sent.text
    events = read_events(b.url, sid, settled(), start=first[-1]["index"] + 1)
    assert [e["type"] for e in events].count("turn.completed") == 1
    # Run by agent t from b's own folder (its script's next answer), not some other agent.
    assert [e["text"] for e in events if e["type"] == "message.completed"] == ["answer 1"]


def test_a_server_that_cannot_run_the_agent_rejects_the_delivery(
    eve_process: Callable[..., EveProcess], tmp_path: Path, script: Path
) -> None:
    data = tmp_path / "data"
    made = _agent(tmp_path / "a1", script)
    sid = _sid(_eve(data, "chat", "--agent", str(made), "--json", "-p", "hi"))
    shutil.rmtree(made)
    other = _agent(tmp_path / "other", script, name="u")
    server = eve_process("start", "--port", "0", "--agent", str(other), "--world", str(data))
    sent = httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "on"}, timeout=WAIT)
    assert sent.status_code == 409, sent.text
    reason = sent.json()["reason"]
    assert "'t'" in reason and "'u'" in reason and "--agent" in reason, reason
    server.stderr_until(f"session {sid}: delivery rejected")


def test_a_model_changed_between_turns_answers_the_next_turn(tmp_path: Path, script: Path) -> None:
    data = tmp_path / "data"
    agent = _agent(tmp_path / "a1", script)
    first = _eve(data, "chat", "--agent", str(agent), "--json", "-p", "hi")
    sid = _sid(first)
    other = write_script(tmp_path / "other.json", [reply(f"other {n}") for n in range(4)])
    _agent(agent, other)  # the same agent, another model
    moved = _eve(data, "chat", "-s", sid, "--agent", str(agent), "--json", "-p", "on")
    assert moved.returncode == 0, moved.stderr
    assert _replies(moved) == ["other 1"]  # the session's second model call, on the new model
    digests = [_digest(first), _digest(moved)]  # each turn names the code that ran it
    assert all(digests) and digests[0] != digests[1], digests


def _digest(done: subprocess.CompletedProcess[str]) -> str:
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return next(str(e.get("agentDigest")) for e in events if e.get("type") == "turn.started")
