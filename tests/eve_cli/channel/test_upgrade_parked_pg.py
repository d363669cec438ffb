"""An upgrade across a PostgreSQL store-format migration strands no parked session (real
processes, real PostgreSQL): sessions parked on a timer (the sleep tool), on an approval, and
between turns of a conversation are written by `eve start`, then stored again in the schema
of the last pre-release eve (version 9: every row a `[1, crc32, body]` frame, its DDL frozen
in `cli/pg_schema_9/`); today's `eve start` converts it at its first open (to the current
version, through every step) and every session goes on: the timer wakes its turn at its
time, the approval answered finishes its turn, the conversation answers its next message."""

from __future__ import annotations

import datetime as dt
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.eve_cli.channel.channel_support import WAIT, EveProcess, eventually, read_events
from tests.eve_cli.cli.test_pg_conversion import _downgrade, _make_old, _schema
from tests.eve_cli.rt_support import DANGER_TOOL, call, reply
from tests.pg_support import fresh_schema, require_server
from world.stores.postgres.schema import IDENTITY, VERSION

pytestmark = pytest.mark.slow  # real `eve start` processes

API = "/eve/v1"
SLEEP = 8.0  # the parked timer: due after the upgrade, on a loaded machine too


@pytest.fixture
def worlds() -> Iterator[tuple[str, str]]:
    """(the world the sessions are made in, the schema they are stored again in, old)."""
    require_server()
    with fresh_schema() as new, fresh_schema() as old:
        yield new, old


def _agent(folder: Path, script: Path) -> Path:
    (folder / "tools").mkdir(parents=True)
    (folder / "agent.py").write_text(
        "from eve_cli import define_agent\n\n"
        f"agent = define_agent(model={f'scripted:{script}'!r}, name='t', sleep=True,"
        " instructions='You are a test agent.')\n"
    )
    (folder / "tools" / "main.py").write_text(DANGER_TOOL)
    return folder


def _script(path: Path, entries: list[dict[str, Any]]) -> None:
    """The script every session's model answers from (entry N: a session's N-th call);
    rewritten between sessions, so each first call does what its session is for."""
    import json

    path.write_text(json.dumps(entries), encoding="utf-8")
    time.sleep(0.01)  # a next rewrite of the same size is seen as changed (its mtime)


def _view(server: EveProcess, sid: str) -> dict[str, Any]:
    return dict(httpx.get(f"{server.url}{API}/session/{sid}", timeout=WAIT).json())


def _created(server: EveProcess, text: str, parked: Callable[[dict[str, Any]], bool]) -> str:
    body = {"message": text}
    sid = str(httpx.post(f"{server.url}{API}/session", json=body, timeout=WAIT).json()["sessionId"])
    assert eventually(lambda: parked(_view(server, sid))), _view(server, sid)
    return sid


def _replies(server: EveProcess, sid: str) -> list[str]:
    return [str(s["text"]) for t in _view(server, sid)["turns"] for s in t["steps"] if s["text"]]


def test_parked_sessions_resume_after_an_upgrade_across_a_schema_conversion(
    eve_process: Callable[..., EveProcess], tmp_path: Path, worlds: tuple[str, str]
) -> None:
    new, old = worlds
    script = tmp_path / "script.json"
    agent = _agent(tmp_path / "agent", script)
    _script(script, [reply("", call("sleep", seconds=SLEEP))])
    before = eve_process("start", "--port", "0", "--agent", str(agent), "--world", new)
    sleeping = _created(before, "nap", lambda v: v["parkedOn"] == "sleep")
    due = dt.datetime.fromisoformat(str(_view(before, sleeping)["wakeAt"])).timestamp()
    _script(script, [reply("", call("danger", x=1))])
    approval = _created(before, "do it", lambda v: v["parkedOn"] == "approval")
    _script(script, [reply("hello")])
    talking = _created(before, "hi", lambda v: v["status"] == "waiting")
    before.signal(signal.SIGTERM)
    assert before.wait() == 0
    _script(script, [reply("unused"), reply("resumed")])  # every session's next call

    # The same store as the last pre-release eve kept it: version 9 rows, its identity.
    with psycopg.connect(require_server(), autocommit=True) as conn:
        _make_old(conn, _schema(old))
        _downgrade(conn, _schema(new), _schema(old))
        o, n = f'"{_schema(old)}"', f'"{_schema(new)}"'
        conn.execute(IDENTITY.format(s=o))
        conn.execute(f"UPDATE {o}.store_identity SET id = (SELECT id FROM {n}.store_identity)")
        assert conn.execute(f"SELECT max(version) FROM {o}.schema_version").fetchone() == (9,)

    after = eve_process("start", "--port", "0", "--agent", str(agent), "--world", old)
    assert f"schema {VERSION})" in after.line, after.line  # converted at its first open
    rows = {r["id"]: r for r in httpx.get(f"{after.url}{API}/sessions", timeout=WAIT).json()[
        "sessions"]}  # fmt: skip
    assert rows[approval]["status"] == "parked" and rows[talking]["status"] == "waiting"
    assert [p["kind"] for p in _view(after, approval)["pending"]] == ["approval"]

    # The approval answered: its call runs and its turn finishes.
    [pending] = _view(after, approval)["pending"]
    answer = {"inputResponses": [{"requestId": pending["requestId"], "approved": True}]}
    sent = httpx.post(f"{after.url}{API}/session/{approval}", json=answer, timeout=WAIT)
    assert sent.status_code == 202, sent.text
    assert eventually(lambda: _view(after, approval)["status"] == "waiting")
    [action] = [a for t in _view(after, approval)["turns"] for s in t["steps"]
                for a in s["actions"]]  # fmt: skip
    assert (action["name"], action["status"], str(action["output"])) == ("danger", "completed", "1")
    assert _replies(after, approval) == ["resumed"]

    # The conversation's next message is answered.
    sent = httpx.post(f"{after.url}{API}/session/{talking}", json={"message": "more"},
                      timeout=WAIT)  # fmt: skip
    assert sent.status_code == 202 and sent.json()["disposition"] == "started", sent.text
    assert eventually(lambda: _replies(after, talking) == ["hello", "resumed"])

    # The timer wakes the sleeping turn at its time (not before), which then answers.
    read_events(after.url, sleeping, lambda e: e["type"] == "turn.completed",
                timeout=WAIT + SLEEP)  # fmt: skip
    assert time.time() >= due
    [slept] = [a for t in _view(after, sleeping)["turns"] for s in t["steps"]
               for a in s["actions"]]  # fmt: skip
    assert str(slept["output"]).startswith("Slept "), slept
    assert _replies(after, sleeping) == ["resumed"]
    assert _view(after, sleeping)["status"] == "waiting"
