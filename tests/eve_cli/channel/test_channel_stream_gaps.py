"""Over HTTP, a stream item a repair replaced is read around (issue 22): `GET /session` folds
the rest, `GET /stream` gives one `event.lost` at its index and every other event as stored,
and a new message is answered."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.eve_cli.channel.channel_support import WAIT, ServerThread, read_events
from tests.eve_cli.rt_support import AgentFactory
from tests.eve_cli.test_stream_gaps import SCRIPT, lost_event_session

API = "/eve/v1"


def test_the_http_readers_read_around_a_lost_event(
    serve: Callable[..., ServerThread], make_agent: AgentFactory
) -> None:
    agent = make_agent(script=SCRIPT)
    sid, before, lost = lost_event_session(Path(os.environ["EVE_DATA_DIR"]), agent)

    server = serve(agent)
    view = httpx.get(f"{server.url}{API}/session/{sid}", timeout=WAIT)
    assert view.status_code == 200, view.text
    assert [t["input"] for t in view.json()["turns"]] == ["one", "two"]
    stream = httpx.get(f"{server.url}{API}/session/{sid}/stream?follow=0", timeout=WAIT)
    lines = [line for line in stream.text.splitlines() if line.strip()]
    events: list[dict[str, Any]] = [json.loads(line) for line in lines]
    assert [e["type"] for e in events if e["index"] == lost] == ["event.lost"]
    kept = [e for e in events if e["index"] != lost]
    assert kept == [e for e in before if e["index"] != lost]
    sent = httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "three"}, timeout=WAIT)
    assert sent.status_code == 202, sent.text

    def answered(event: dict[str, Any]) -> bool:
        return event["type"] == "message.completed" and event.get("text") == "third answer"

    assert read_events(server.url, sid, answered, start=len(events))[-1]["text"] == "third answer"
