"""`eve session move SESSION --agent NAME|FOLDER` (real processes, a data directory and
PostgreSQL): a session of another agent is refused naming both agents and this command; the
move is an event of the session (`session.moved`), and after it the session's turns run the new
agent — over `eve chat` and over HTTP, where the delivery check reads the session's current
agent from its events. A session with a turn under way is not moved; messages waiting for a
session when it moves are the new agent's; every listing shows the agent it moved to."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from eve_cli.execution import TAIL
from tests.eve_cli.channel.browser_support import expect
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

pytestmark = pytest.mark.slow  # real `eve` processes, several per test

API = "/eve/v1"


def _agent_of(tmp_path: Path, name: str) -> Path:
    """Agent ``name`` in a folder of that name, answering "<name> <n>" to model call n."""
    script = write_script(tmp_path / f"{name}.json", [reply(f"{name} {n}") for n in range(4)])
    return _agent(tmp_path / name, script, name=name)


@pytest.fixture
def world(world_spec: str) -> str:
    """Where the sessions live (a data directory, or a PostgreSQL schema), by the name these
    tests use: the shared `world_spec`."""
    return world_spec


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


def _deliver(world: str, agent: Path, sid: str, texts: list[str]) -> None:
    """Messages stored for ``sid`` and taken by no one (no process drives it)."""
    from eve_cli.runtime import Runtime

    async def go() -> None:
        runtime = Runtime(data_dir=world, agent_dir=agent)
        try:
            for text in texts:
                await runtime.deliver(sid, text)
        finally:
            runtime.close()

    asyncio.run(go())


def _rows(server: EveProcess, data: Path, world: str) -> list[tuple[str, object]]:
    """The agent column of every listing: the HTTP one (the browser view's) and `inspect`'s."""
    http = httpx.get(f"{server.url}{API}/sessions", timeout=WAIT).json()["sessions"]
    listed = json.loads(_eve(data, "inspect", "--json", "--world", world).stdout)
    table = _eve(data, "inspect", "--world", world).stdout
    rows = [line.split()[:2] for line in table.splitlines() if line.startswith("s_")]
    return [(r["id"], r["agent"]) for r in http + listed] + [(sid, agent) for sid, agent in rows]


def test_messages_waiting_when_a_session_moves_are_taken_by_the_agent_it_moves_to(
    eve_process: Callable[..., EveProcess], tmp_path: Path, world: str
) -> None:
    """Deliveries not taken yet when the move comes (no worker served the session): the move
    applies first, then each message is a turn of the new agent; nothing is lost."""
    data = tmp_path / "unused"
    t, u = _agent_of(tmp_path, "t"), _agent_of(tmp_path, "u")
    sid = _sid(_eve(data, "chat", "--world", world, "--agent", str(t), "--json", "-p", "hi"))
    _deliver(world, t, sid, ["one", "two"])
    moved = _eve(data, "session", "move", sid, "--agent", "u", "--world", world)
    assert moved.returncode == 0, moved.stderr
    assert f"session {sid}: moving to agent 'u'" in moved.stdout, moved.stdout
    server = eve_process("start", "--port", "0", "--agent", str(u), "--world", world)
    events = read_events(server.url, sid, lambda e: e["type"] == "turn.completed"
                         and e.get("turnId") == "t3")  # fmt: skip
    kinds = [e["type"] for e in events]
    moved_at = kinds.index("session.moved")
    received = [(e["index"], e["text"]) for e in events if e["type"] == "message.received"]
    assert [text for _, text in received] == ["hi", "one", "two"]
    assert all(index > moved_at for index, _ in received[1:])  # moved before either was taken
    assert [e["text"] for e in events if e["type"] == "message.completed"] == ["t 0", "u 1", "u 2"]
    assert [e.get("agent") for e in events if e["type"] == "turn.started"] == [None, "u", "u"]
    assert set(_rows(server, data, world)) == {(sid, "u")}


def test_every_listing_shows_the_agent_a_session_moved_to(
    eve_process: Callable[..., EveProcess], tab: Callable[..., Any], tmp_path: Path
) -> None:
    """Right after the move, and after a turn of the new agent longer than the listing's
    tail of events (the row's agent then comes from further back, not the session's first)."""
    data, world = tmp_path / "unused", str(tmp_path / "data")
    t = _agent_of(tmp_path, "t")
    steps = [reply("unused")] + [call("noop", n=n) for n in range(6)] + [reply("u done")]
    u = _agent(tmp_path / "u", write_script(tmp_path / "u.json", steps), name="u")
    (u / "tools" / "main.py").write_text(
        "from eve_cli import tool\n\n\n@tool\ndef noop(n: int) -> str:\n"
        '    """Do nothing."""\n    return "ok"\n'
    )
    sid = _sid(_eve(data, "chat", "--world", world, "--agent", str(t), "--json", "-p", "hi"))
    server = eve_process("start", "--port", "0", "--agent", str(u), "--world", world)
    assert set(_rows(server, data, world)) == {(sid, "t")}
    page = tab().page  # the browser view's list, open through the move
    page.goto(server.url + "/")
    shown = page.locator(f'tr[data-id="{sid}"] td[data-label="agent"]')
    expect(shown).to_have_text("t")
    moved = _eve(data, "session", "move", sid, "--agent", "u", "--world", world)
    assert moved.returncode == 0 and "moved from agent 't' to 'u'" in moved.stdout, moved.stdout
    assert set(_rows(server, data, world)) == {(sid, "u")}
    expect(shown).to_have_text("u")  # updated in place, without a reload
    sent = httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "go"}, timeout=WAIT)
    assert sent.status_code == 202, sent.text
    events = read_events(server.url, sid, lambda e: e["type"] == "turn.completed"
                         and e.get("turnId") == "t2")  # fmt: skip
    last_start = max(e["index"] for e in events if e["type"] == "turn.started")
    assert events[-1]["index"] - last_start > TAIL  # the row's tail does not reach it
    assert set(_rows(server, data, world)) == {(sid, "u")}
    page.reload()
    expect(shown).to_have_text("u")


def test_messages_waiting_without_a_move_make_one_turn_as_before(tmp_path: Path) -> None:
    """Without a move, what waits with the first message steers the turn it starts."""
    data, world = tmp_path / "unused", str(tmp_path / "data")
    t = _agent_of(tmp_path, "t")
    sid = _sid(_eve(data, "chat", "--world", world, "--agent", str(t), "--json", "-p", "hi"))
    _deliver(world, t, sid, ["one", "two"])
    more = _eve(data, "chat", "--world", world, "-s", sid, "--agent", str(t), "--json", "-p", "3")
    assert more.returncode == 0, more.stderr
    shown = _eve(data, "inspect", sid, "--events", "--json", "--world", world)
    events = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    assert [(e["turnId"], e["text"], e["disposition"]) for e in events
            if e["type"] == "message.received"] == [
        ("t1", "hi", "started"), ("t2", "one", "started"), ("t2", "two", "steered"),
        ("t3", "3", "started")]  # fmt: skip


def test_a_move_to_a_folder_answers_the_waiting_messages_with_its_agent(tmp_path: Path) -> None:
    """Given the folder, `eve session move` serves the agent itself: the move, then a turn of
    the new agent for each message that was waiting."""
    data, world = tmp_path / "unused", str(tmp_path / "data")
    t, u = _agent_of(tmp_path, "t"), _agent_of(tmp_path, "u")
    sid = _sid(_eve(data, "chat", "--world", world, "--agent", str(t), "--json", "-p", "hi"))
    _deliver(world, t, sid, ["one", "two"])
    moved = _eve(data, "session", "move", sid, "--agent", str(u), "--world", world)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == f"session {sid}: moved from agent 't' to 'u'", moved.stdout
    shown = _eve(data, "inspect", sid, "--events", "--json", "--world", world)
    events = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    kinds = [e["type"] for e in events]
    assert kinds.index("session.moved") < [i for i, k in enumerate(kinds)
                                           if k == "message.received"][1]  # fmt: skip
    assert [e["text"] for e in events if e["type"] == "message.completed"] == ["t 0", "u 1", "u 2"]
