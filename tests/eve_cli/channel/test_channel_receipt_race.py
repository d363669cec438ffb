"""Receipts tell the truth when a message lands as a turn ends (SPEC D7, issue 22).

A real `eve start` process runs the turns, another session's long tool keeping it driving two
sessions at once (so its storage calls leave the event loop, and a request is served between
a turn's final poll of the inbox and its end, as with several workers). A client sends each
round's second message at a random moment around the end of the first one's turn. Each
receipt (started / steered) must be what the transcript shows the message became: before the
receipt was decided from the delivery's id, a message that missed the turn's final poll was
told `steered` and then started a turn of its own.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    reply,
    text_of,
    write_agent,
    write_script,
)

API = "/eve/v1"
ROUNDS = 30
DELAY = 0.02  # the model's answer, seconds

TOOLS = """
import time
from pathlib import Path
from eve_cli import tool

@tool
def hold() -> str:
    \"\"\"Busy until the test ends (the first call only).\"\"\"
    flag = Path(__file__).parent.parent / "held"
    if not flag.exists():
        flag.touch()
        release = flag.with_name("release")
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return "held"
"""


def test_a_message_landing_as_a_turn_ends_is_told_what_became_of_it(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    # Entry 0: the busy session's tool call; every later model call answers after DELAY.
    entries = [call("hold"), *(reply(f"answer {i}", delay=DELAY) for i in range(2 * ROUNDS + 4))]
    agent = write_agent(tmp_path / "agent", write_script(tmp_path / "s.json", entries), TOOLS)
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    try:
        receipts, seen = asyncio.run(_race(server.url, agent))
    finally:
        (agent / "release").touch()
    assert set(receipts) == set(seen), "a delivered message never reached the transcript"
    wrong = {t: (receipts[t], seen[t]) for t in receipts if receipts[t] != seen[t]}
    assert not wrong, f"receipt vs transcript: {wrong}"
    late = {seen[t] for t in receipts if t.startswith("b")}
    assert late == {"started", "steered"}, "the race was not run on both sides of the final poll"


async def _race(url: str, agent: Path) -> tuple[dict[str, str], dict[str, str]]:
    rng = random.Random(22)
    receipts: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
        await client.post(f"{API}/session", json={"message": "keep the server busy"})
        async with asyncio.timeout(WAIT):
            while not (agent / "held").exists():
                await asyncio.sleep(0.01)
        sid = (await client.post(f"{API}/session", json={})).json()["sessionId"]

        async def send(text: str) -> None:
            response = await client.post(f"{API}/session/{sid}", json={"message": text})
            assert response.status_code == 202, response.text
            receipts[text] = response.json()["disposition"]

        ends: list[float] = []  # seconds from a's receipt to its turn's end being seen
        events: list[dict[str, Any]] = []
        for r in range(ROUNDS):
            known = len(events) if r else 0
            await send(f"a{r}")  # a's turn starts: its one step waits DELAY for the model
            sent = time.monotonic()
            if r % 3 == 0:  # at once: folded into a's turn
                await send(f"b{r}")
            elif r % 3 == 1:  # once a's turn is seen ended: before or after the next receive
                while not _ended(await _events(client, sid, known), f"a{r}"):
                    await asyncio.sleep(0.005)
                ends.append(time.monotonic() - sent)
                await send(f"b{r}")
            else:  # around the end of a's turn, as long as such turns take on this machine
                typical = sorted(ends)[len(ends) // 2] if ends else 3 * DELAY
                await asyncio.sleep(rng.uniform(0.3, 1.2) * typical)
                await send(f"b{r}")
            async with asyncio.timeout(WAIT):
                while not _answered(events := await _events(client, sid), 2 * r + 2):
                    await asyncio.sleep(0.01)
    seen = {
        text_of(e): str(e.get("disposition")) for e in events if e["type"] == "message.received"
    }
    return receipts, seen


async def _events(client: httpx.AsyncClient, sid: str, start: int = 0) -> list[dict[str, Any]]:
    params = {"follow": "0", "startIndex": str(start)}
    response = await client.get(f"{API}/session/{sid}/stream", params=params)
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def _ended(events: list[dict[str, Any]], text: str) -> bool:
    """True once the turn that took message ``text`` has ended."""
    turn = next(
        (e.get("turnId") for e in events if e["type"] == "message.received" and text_of(e) == text),
        None,
    )
    ends = ("turn.completed", "turn.failed")
    return turn is not None and any(e["type"] in ends and e.get("turnId") == turn for e in events)


def _answered(events: list[dict[str, Any]], messages: int) -> bool:
    """True once the session waits again with ``messages`` messages taken."""
    taken = sum(e["type"] == "message.received" for e in events)
    return taken == messages and str(events[-1]["type"]) == "session.waiting"
