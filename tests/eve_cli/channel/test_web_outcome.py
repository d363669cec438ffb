"""The browser view answers "outcome unknown" requests (SPEC §16) in a real Chromium: an
`unsafe` call running in each of three sessions when a real `eve start` is killed with SIGKILL
parks, after a restart, on its request; each of the three answers is clicked in the page, and
the tool's log proves that only the call the user asked to run again ran twice."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.eve_cli.channel.browser_support import Tab, expect
from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    eventually,
    of_type,
    read_events,
    reply,
    write_agent,
    write_script,
)

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

API = "/eve/v1"

# Logs each run with its session; while `<log>.stall` exists a run logs "stalled" and hangs.
CHARGE = """
import asyncio, os
from eve_cli import ToolContext, tool

LOG = {log!r}

@tool(effects="unsafe")
async def charge(amount: int, ctx: ToolContext) -> str:
    \"\"\"Charge a card.\"\"\"
    with open(LOG, "a") as f:
        f.write(f"charge {{ctx.session_id}}\\n")
        if os.path.exists(LOG + ".stall"):
            f.write("stalled\\n")
    if os.path.exists(LOG + ".stall"):
        await asyncio.sleep(60)
    return f"charged {{amount}}"
"""


def runs(log: Path) -> Counter[str]:
    return Counter(log.read_text().splitlines()) if log.exists() else Counter()


def test_each_outcome_answer_clicked_in_the_page_settles_its_interrupted_call(
    eve_process: Callable[..., EveProcess],
    tab: Callable[..., Tab],
    tmp_path: Path,
    world_spec: str,
) -> None:
    log = tmp_path / "effects.log"
    script = write_script(tmp_path / "s.json", [call("charge", amount=5), reply("done")])
    agent = write_agent(tmp_path / "agent", script, CHARGE.format(log=str(log)))
    args = ("--agent", str(agent), "--world", world_spec)
    server = eve_process("start", "--port", "0", *args)
    port = server.url.rsplit(":", 1)[1]
    Path(f"{log}.stall").write_text("")
    rerun, failed, given = (
        httpx.post(f"{server.url}{API}/session", json={"message": "pay"}, timeout=WAIT).json()[
            "sessionId"
        ]
        for _ in range(3)
    )
    assert eventually(lambda: runs(log)["stalled"] == 3), log.read_text()
    server.signal(signal.SIGKILL)
    server.wait()
    Path(f"{log}.stall").unlink()

    again = eve_process("start", "--port", port, *args)
    t = tab()
    cards = t.page.locator(".pending .ask.outcome")
    for sid in (failed, given, rerun):
        read_events(again.url, sid, of_type("turn.waiting"))
        t.page.goto(f"{again.url}/#/s/{sid}")
        expect(t.page.locator(".session-head")).to_contain_text("parked: outcome")
        expect(cards).to_have_count(1)
        expect(cards).to_contain_text("charge(amount=5)")
        expect(cards).to_contain_text("whether it took effect is unknown")
        expect(cards.locator("pre.args")).to_contain_text('"amount": 5')
        expect(t.page.locator(".msg.tool .badge")).to_have_text("waiting for its outcome")
        if sid == failed:
            cards.get_by_role("button", name="Treat as failed").click()
        elif sid == given:
            cards.get_by_label("the call's result").fill("charged 5 by hand")
            cards.get_by_label("the call's result").press("Enter")
        else:
            # Two answered, none asked to run again: no call ran a second time.
            assert runs(log) == Counter(
                {f"charge {s}": 1 for s in (rerun, failed, given)} | {"stalled": 3}
            )
            cards.get_by_role("button", name="Run it again").click()
        expect(t.page.locator(".msg.assistant")).to_have_text("done")
        expect(cards).to_have_count(0)

    assert runs(log) == Counter(
        {f"charge {rerun}": 2, f"charge {failed}": 1, f"charge {given}": 1, "stalled": 3}
    )
    said = {
        "treated as failed": failed,
        "result given: charged 5 by hand": given,
        "run again": rerun,
    }
    outputs = {failed: "treat it as failed", given: "charged 5 by hand", rerun: "charged 5"}
    for note, sid in said.items():
        t.page.goto(f"{again.url}/#/s/{sid}")
        expect(t.page.locator(".msg.note")).to_have_text(note)
        expect(t.page.locator(".msg.tool .out")).to_contain_text(outputs[sid])
        events = read_events(again.url, sid, of_type("turn.completed"), start=0)
        [resolved] = [e for e in events if e["type"] == "input.resolved"]
        assert resolved["outcome"] == {failed: "failed", given: "result", rerun: "rerun"}[sid]
