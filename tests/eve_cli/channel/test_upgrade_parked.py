"""An upgrade across a store-format migration strands no parked session (real processes): a
store of format 1 written by the pre-release eve (`cli/store_format_1_parked/`: one session
parked on an approval, one between turns of a conversation) is opened by today's `eve start`;
the migration runs once, and both sessions go on to the right answers. (No session of that
store sleeps on a timer: that eve had none; a timer-parked session across a restart of
`eve start` is `test_channel_sleep.py`'s. PostgreSQL's conversion, with a session parked on a
timer: `test_upgrade_parked_pg.py`.)"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.eve_cli.channel.channel_support import WAIT, EveProcess, read_events, settled

pytestmark = pytest.mark.slow  # real `eve start` processes

FIXTURE = Path(__file__).resolve().parents[1] / "cli" / "store_format_1_parked"
APPROVAL, CONVERSATION = "s_9deb65b8788f41ff94a21784", "s_8b34dbc2c05eb4d7e25d48ef"
API = "/eve/v1"


def _replies(events: list[dict[str, object]]) -> list[object]:
    return [e["text"] for e in events if e["type"] == "message.completed"]


def test_parked_sessions_of_the_previous_format_resume_after_the_upgrade(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    data, agent = tmp_path / "data", tmp_path / "checkout" / "agent"
    shutil.copytree(FIXTURE / "store", data)
    shutil.copytree(FIXTURE / "agent", agent)  # the agent, at another path than it was made
    server = eve_process("start", "--port", "0", "--agent", str(agent), "--world", str(data))
    server.stderr_until(f"{data}: migrated store format 1 -> 3: 2 run families")
    assert json.loads((data / "FORMAT").read_text())["version"] == 3
    rows = {r["id"]: r for r in httpx.get(f"{server.url}{API}/sessions", timeout=WAIT).json()[
        "sessions"]}  # fmt: skip
    assert (rows[APPROVAL]["status"], rows[CONVERSATION]["status"]) == ("parked", "waiting")
    parked = httpx.get(f"{server.url}{API}/session/{APPROVAL}", timeout=WAIT).json()
    assert [p["requestId"] for p in parked["pending"]] == ["t1:call_0_0"]

    # The approval answered: its turn runs the approved call and finishes.
    since = parked["events"]
    answer = {"inputResponses": [{"requestId": "t1:call_0_0", "approved": True}]}
    sent = httpx.post(f"{server.url}{API}/session/{APPROVAL}", json=answer, timeout=WAIT)
    assert sent.status_code == 202, sent.text
    events = read_events(server.url, APPROVAL, _turn_ended, start=since)
    results = [e for e in events if e["type"] == "action.result"]
    assert [(r["name"], r["status"], str(r["output"])) for r in results] == [
        ("danger", "completed", "1")
    ], results
    assert _replies(events) == ["approved and done"]
    assert [e["type"] for e in events if e["type"].startswith("turn.")][-1] == "turn.completed"

    # The conversation's next message: answered by the script's next entry.
    before = httpx.get(f"{server.url}{API}/session/{CONVERSATION}", timeout=WAIT).json()
    sent = httpx.post(
        f"{server.url}{API}/session/{CONVERSATION}", json={"message": "more"}, timeout=WAIT
    )
    assert sent.status_code == 202 and sent.json()["disposition"] == "started", sent.text
    events = read_events(server.url, CONVERSATION, settled(), start=before["events"])
    assert _replies(events) == ["and more"]
    assert [t["status"] for t in httpx.get(
        f"{server.url}{API}/session/{CONVERSATION}", timeout=WAIT).json()["turns"]] == [
        "completed", "completed"]  # fmt: skip


def _turn_ended(event: dict[str, object]) -> bool:
    return event["type"] in ("turn.completed", "turn.failed", "turn.cancelled")
