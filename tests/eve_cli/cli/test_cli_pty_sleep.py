"""`eve chat` at a real terminal while its turn sleeps (the sleep tool): a line typed then is
delivered at once and wakes the sleep as a steer (the model is told how long it slept),
Ctrl-C typed then cancels the turn, and a line half-typed when the sleep ends by itself is
still there at the next prompt."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.eve_cli.cli.cli_helpers import PROMPT, Terminal
from tests.eve_cli.rt_support import call, reply, write_agent


def sleeper(root: Path, seconds: float, *after: str) -> Path:
    script = [reply("", call("sleep", seconds=seconds)), *(reply(text) for text in after)]
    return write_agent(root, script=script, agent_args="sleep=True")


def events(sid: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", "inspect", sid, "--events", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def asleep(terminal: Callable[..., Terminal], agent: Path) -> tuple[Terminal, str]:
    """A chat whose first turn sleeps, at the prompt it shows meanwhile."""
    term = terminal("chat", "--agent", str(agent))
    sid = term.out.expect(r"session\s+(\S+)").group(1)
    term.out.expect(PROMPT)
    term.type("nap\r")
    term.out.expect("a message typed here or sent to session")
    term.out.expect(PROMPT)
    return term, sid


def test_a_line_typed_while_the_turn_sleeps_wakes_it_as_a_steer(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    term, sid = asleep(terminal, sleeper(tmp_path / "agent", 120, "awake now"))
    term.type("/help\r")  # not run now: the turn is still asleep
    term.out.expect("/help is not run while the turn sleeps")
    typed = time.monotonic()
    term.type("wake up\r")
    term.out.expect("awake now")
    assert time.monotonic() - typed < 30  # not the 120 s timer
    term.out.expect(PROMPT)
    term.type("\x04")
    assert term.wait() == 0
    stored = events(sid)
    received = [(e["text"], e["turnId"]) for e in stored if e["type"] == "message.received"]
    [(first, turn), (second, same)] = received
    assert (first, second, same) == ("nap", "wake up", turn)  # one turn: steered, not queued
    [result] = [e for e in stored if e["type"] == "action.result" and e["name"] == "sleep"]
    assert "Woken early by a message" in str(result["output"]), result
    assert sum(e["type"] == "turn.started" for e in stored) == 1


def test_ctrl_c_typed_while_the_turn_sleeps_cancels_it(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    term, sid = asleep(terminal, sleeper(tmp_path / "agent", 120, "never said"))
    term.type("\x03")
    term.out.expect("cancelling the turn")
    term.out.expect("turn cancelled")
    term.out.expect(PROMPT)
    term.type("\x04")
    assert term.wait() == 0
    stored = events(sid)
    assert "turn.cancelled" in [e["type"] for e in stored]
    assert "never said" not in [e.get("text") for e in stored]


def test_a_line_half_typed_when_the_sleep_ends_is_kept_for_the_next_prompt(
    terminal: Callable[..., Terminal], tmp_path: Path
) -> None:
    term, sid = asleep(terminal, sleeper(tmp_path / "agent", 1.5, "slept well", "then this"))
    term.type("and th")
    term.out.expect("slept well")
    term.out.expect(PROMPT)
    term.type("en?\r")
    term.out.expect("then this")
    term.out.expect(PROMPT)
    term.type("\x04")
    assert term.wait() == 0
    said = [e["text"] for e in events(sid) if e["type"] == "message.received"]
    assert said == ["nap", "and then?"]
