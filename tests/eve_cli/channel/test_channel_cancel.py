"""`POST …/cancel` to a running `eve start`: the model reply it is streaming stops at once (the
model server sees the connection close) and the turn ends cancelled."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.eve_cli.channel.channel_support import WAIT, EveProcess, eventually, read_events, settled
from tests.eve_cli.slow_model import SlowModelServer

API = "/eve/v1"


def test_post_cancel_closes_the_model_stream_within_a_second(
    eve_process: Callable[..., EveProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    model = SlowModelServer(interval=0.1, seconds=60)
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", model.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("NO_PROXY", "*")
        agent = tmp_path / "agent"
        agent.mkdir()
        (agent / "agent.py").write_text(
            "from eve_cli import define_agent\n\nagent = define_agent(model='openai:slow')\n"
        )
        server = eve_process("start", "--port", "0", "--agent", str(agent))
        created = httpx.post(f"{server.url}{API}/session", json={"message": "go"}, timeout=WAIT)
        sid = created.json()["sessionId"]
        assert eventually(lambda: model.chunks >= 3), "the reply never streamed"
        pressed = time.monotonic()
        answer = httpx.post(f"{server.url}{API}/session/{sid}/cancel", json={}, timeout=WAIT)
        assert answer.status_code < 300, answer.text
        assert eventually(lambda: model.closed_at is not None, timeout=10)
        assert model.closed_at is not None and model.closed_at - pressed < 1.0
        events = read_events(server.url, sid, settled())
        assert "turn.cancelled" in [e["type"] for e in events]
        assert not model.finished
    finally:
        model.stop()
