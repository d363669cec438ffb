"""`eve session move SESSION --agent NAME|FOLDER` (real processes, a data directory and
PostgreSQL): a session of another agent is refused naming both agents and this command; the
move is an event of the session (`session.moved`), and after it the session's turns run the new
agent — over `eve chat` and over HTTP, where the delivery check reads the session's current
agent from its events. A session with a turn under way is not moved."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    read_events,
    reply,
    settled,
    write_script,
)
from tests.eve_cli.channel.test_agent_identity import _agent, _eve, _replies, _sid
from tests.eve_cli.rt_support import DANGER_TOOL
from tests.pg_support import fresh_schema, require_server

pytestmark = pytest.mark.slow  # real `eve` processes, several per test

API = "/eve/v1"


def _agent_of(tmp_path: Path, name: str) -> Path:
    """Agent ``name`` in a folder of that name, answering "<name> <n>" to model call n."""
    script = write_script(tmp_path / f"{name}.json", [reply(f"{name} {n}") for n in range(4)])
    return _agent(tmp_path / name, script, name=name)


@pytest.fixture(params=["local", "postgresql"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "local":
        yield str(tmp_path / "data")
        return
    require_server()
    with fresh_schema() as url:
        yield url


def test_a_session_moved_to_another_agent_runs_it_from_then_on(
    tmp_path: Path, world: str
) -> None:
    data = tmp_path / "unused"  # every call names --world
    t, u = _agent_of(tmp_path, "t"), _agent_of(tmp_path, "u")
    first = _eve(data, "chat", "--world", world, "--agent", str(t), "--json", "-p", "hi")
    sid = _sid(first)
    refused = _eve(data, "chat", "--world", world, "-s", sid, "--agent", str(u), "-p", "on")
    assert refused.returncode == 2, refused.stdout
    [line] = refused.stderr.strip().splitlines()
    assert "'t'" in line and "'u'" in line and f"eve session move {sid} --agent" in line, line
    moved = _eve(data, "session", "move", sid, "--agent", str(u), "--world", world)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == f"session {sid}: moved from agent 't' to 'u'", moved.stdout
    again = _eve(data, "session", "move", sid, "--agent", "u", "--world", world)
    assert again.stdout.strip() == f"session {sid} is agent 'u' already", again.stdout
    on = _eve(data, "chat", "--world", world, "-s", sid, "--agent", str(u), "--json", "-p", "on")
    assert on.returncode == 0, on.stderr
    assert _replies(on) == ["u 1"]  # the session's second model call, on u's model
    shown = _eve(data, "inspect", sid, "--events", "--json", "--world", world)
    events = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    [move] = [e for e in events if e["type"] == "session.moved"]
    assert (move["agent"], move["previous"]) == ("u", "t")
    assert [e.get("agent") for e in events if e["type"] == "turn.started"] == [None, "u"]
    view = json.loads(_eve(data, "inspect", sid, "--json", "--world", world).stdout)
    assert view["agent"] == "u"
    # And back, by name: t's folder serves it again.
    assert _eve(data, "session", "move", sid, "--agent", "t", "--world", world).returncode == 0
    back = _eve(data, "chat", "--world", world, "-s", sid, "--agent", str(t), "--json", "-p", "x")
    assert back.returncode == 0 and _replies(back) == ["t 2"], back.stderr


def test_a_server_takes_a_moved_session_and_refuses_it_before(
    eve_process: Callable[..., EveProcess], tmp_path: Path, world: str
) -> None:
    data = tmp_path / "unused"
    t, u = _agent_of(tmp_path, "t"), _agent_of(tmp_path, "u")
    sid = _sid(_eve(data, "chat", "--world", world, "--agent", str(t), "--json", "-p", "hi"))
    shutil.rmtree(t)  # agent t is served nowhere now
    server = eve_process("start", "--port", "0", "--agent", str(u), "--world", world)
    sent = httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "on"}, timeout=WAIT)
    assert sent.status_code == 409, sent.text
    assert f"eve session move {sid} --agent u" in sent.json()["reason"], sent.text
    moved = _eve(data, "session", "move", sid, "--agent", "u", "--world", world)
    assert moved.returncode == 0, moved.stderr
    length = len(read_events(server.url, sid, settled()))
    sent = httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "on"}, timeout=WAIT)
    assert sent.status_code == 202 and sent.json()["disposition"] == "started", sent.text
    events = read_events(server.url, sid, settled(), start=length)
    assert [e["text"] for e in events if e["type"] == "message.completed"] == ["u 1"]


def test_a_session_with_a_turn_under_way_is_not_moved(tmp_path: Path) -> None:
    data = tmp_path / "data"
    script = write_script(tmp_path / "t.json", [call("danger", x=1), reply("ok")])
    t = _agent(tmp_path / "t", script)
    (t / "tools" / "main.py").write_text(DANGER_TOOL)
    sid = _sid(_eve(data, "chat", "--agent", str(t), "--json", "-p", "hi"))
    refused = _eve(data, "session", "move", sid, "--agent", "u")
    assert refused.returncode == 1, refused.stdout
    [line] = refused.stderr.strip().splitlines()
    assert "turn under way" in line and "Traceback" not in refused.stderr, line
