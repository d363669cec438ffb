"""SPEC D7 over HTTP: 100 concurrent deliveries to one session, none lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    ServerThread,
    read_events,
    reply,
    text_of,
    write_agent,
    write_script,
)

API = "/eve/v1"
N = 100


def received_messages(events: list[dict[str, Any]]) -> list[str]:
    return [text_of(e) for e in events if e["type"] == "message.received"]


@pytest.mark.parametrize("policy", ["steer", "queue"])
def test_concurrent_deliveries_are_each_accounted_for(
    serve: Callable[..., ServerThread], tmp_path: Path, policy: str
) -> None:
    # Enough answers for one turn per message, each a little slow so deliveries overlap turns.
    entries = [reply(f"answer {i}", delay=0.01) for i in range(2 * N + 10)]
    script = write_script(tmp_path / "s.json", entries)
    server = serve(write_agent(tmp_path / "agent", script))
    sid = httpx.post(f"{server.url}{API}/session", json={}, timeout=WAIT).json()["sessionId"]

    async def send_all() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=N)
        async with httpx.AsyncClient(base_url=server.url, timeout=WAIT, limits=limits) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"{API}/session/{sid}", json={"message": f"m{i}", "turnPolicy": policy}
                    )
                    for i in range(N)
                )
            )

    responses = asyncio.run(send_all())
    accepted: set[str] = set()
    rejected: set[str] = set()
    for i, response in enumerate(responses):
        body = response.json()
        if response.status_code == 202:
            assert body["disposition"] in ("started", "steered", "queued"), body
            accepted.add(f"m{i}")
        else:
            assert response.status_code == 409, body
            assert body["disposition"] == "rejected" and body["reason"]
            assert body["error"]["code"] == "rejected"
            rejected.add(f"m{i}")
    assert len(accepted) + len(rejected) == N
    if policy == "queue":
        assert not rejected
    # Wait (bounded) until every accepted message has reached the transcript.
    seen: set[str] = set()

    def all_seen(event: dict[str, Any]) -> bool:
        if event["type"] == "message.received":
            seen.add(text_of(event))
        return accepted <= seen and event["type"] == "session.waiting"

    events = read_events(server.url, sid, all_seen)
    messages = received_messages(events)
    assert sorted(messages) == sorted(accepted)  # each exactly once, none invented
    assert not (set(messages) & rejected)


def test_concurrent_receipts_tell_what_happened(
    serve: Callable[..., ServerThread], tmp_path: Path
) -> None:
    # SPEC D7: the sender is told whether its message started a turn, was folded into the
    # running one (steered) or queued. Sent together to a waiting session, one message starts
    # a turn and the others are folded into it (the first answer is slow, so every delivery
    # lands while that turn runs); each receipt must say so.
    n = 8
    entries = [reply("slow first answer", delay=0.5), *(reply(f"answer {i}") for i in range(n))]
    server = serve(write_agent(tmp_path / "agent", write_script(tmp_path / "s.json", entries)))
    sid = httpx.post(f"{server.url}{API}/session", json={}, timeout=WAIT).json()["sessionId"]

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=WAIT) as client:
            return await asyncio.gather(
                *(client.post(f"{API}/session/{sid}", json={"message": f"m{i}"}) for i in range(n))
            )

    receipts = {f"m{i}": r.json()["disposition"] for i, r in enumerate(asyncio.run(send_all()))}
    seen: dict[str, str] = {}

    def all_seen(event: dict[str, Any]) -> bool:
        if event["type"] == "message.received":
            seen[text_of(event)] = event["disposition"]
        return len(seen) == n and event["type"] == "session.waiting"

    read_events(server.url, sid, all_seen)
    assert list(receipts.values()).count("started") == 1, receipts
    assert receipts == seen  # started / steered, as the transcript shows it
