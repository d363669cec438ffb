"""What an operator probes on a real `eve start` process: `/eve/v1/health` (alive),
`/eve/v1/ready` (store and agent), and `/metrics` in the Prometheus text format, read with the
Prometheus client's own parser, behind the API's token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

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

API = "/eve/v1"
TOKEN = "s3cret-operator-token"
TOOLS = '''
from eve_cli import tool

@tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()
'''


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_what_the_worker_did_behind_the_token(
    eve_process: Callable[..., EveProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write_script(
        tmp_path / "s.json", [call("shout", text="hi"), reply("done"), reply("again")]
    )
    agent = write_agent(tmp_path / "agent", script, TOOLS)
    (agent / "prices.json").write_text('{"scripted": {"input": 1000, "output": 2000}}')
    monkeypatch.setenv("EVE_AUTH_TOKEN", TOKEN)
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{server.url}/metrics", timeout=WAIT).status_code == 401
    assert httpx.get(f"{server.url}{API}/ready", timeout=WAIT).json() == {"ready": True}
    created = httpx.post(
        f"{server.url}{API}/session", json={"message": "go"}, headers=auth, timeout=WAIT
    ).json()
    sid = created["sessionId"]
    first = read_events(server.url, sid, settled(), headers=auth)
    httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "more"}, headers=auth)
    more = read_events(server.url, sid, settled(), start=len(first), headers=auth)
    assert [e["type"] for e in first + more].count("turn.completed") == 2
    scraped = httpx.get(f"{server.url}/metrics", headers=auth, timeout=WAIT)
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    got = _samples(scraped.text)
    assert got[("eve_turns_started_total", ())] == 2
    assert got[("eve_turns_ended_total", (("status", "completed"),))] == 2
    assert got[("eve_steps_total", (("status", "completed"),))] == 3
    assert got[("eve_tool_call_seconds_count", (("tool", "shout"),))] == 1
    assert got[("eve_model_call_seconds_count", ())] == 3
    assert got[("eve_deliveries_total", (("disposition", "started"),))] == 2
    assert got[("eve_sessions", (("status", "waiting"),))] == 1
    assert got[("eve_tokens_total", (("kind", "output"),))] > 0
    tokens = {k: got[("eve_tokens_total", (("kind", k),))] for k in ("input", "output")}
    cost = (tokens["input"] * 1000 + tokens["output"] * 2000) / 1e6  # dollars per million
    assert got[("eve_cost_dollars_total", ())] == pytest.approx(cost)


def test_ready_names_a_broken_agent_and_health_stays_alive(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.json", [reply("hi")])
    agent = write_agent(tmp_path / "agent", script, TOOLS)
    server = eve_process("dev", "--port", "0", "--agent", str(agent))
    assert httpx.get(f"{server.url}{API}/ready", timeout=WAIT).status_code == 200
    (agent / "tools" / "main.py").write_text("def broken(:\n")
    server.stderr_until(r"main\.py")  # eve dev reports the broken edit
    answer = httpx.get(f"{server.url}{API}/ready", timeout=WAIT)
    assert answer.status_code == 503
    assert answer.json() == {"ready": False, "problems": ["agent failed to load"]}
    assert httpx.get(f"{server.url}{API}/health", timeout=WAIT).json() == {"ok": True}
