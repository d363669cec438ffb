"""A durable cancel delivered by another process is honoured at the next action boundary of
the process that drives the session: the tool in flight finishes, the next never starts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from eve_cli.runtime import Runtime
from tests.eve_cli.cli.cli_helpers import (
    SCRIPT,
    TWO_TOOLS,
    Reader,
    data_dir,
    tool_results,
    wait_for,
)


def test_a_cancel_from_another_process_stops_the_next_tool(
    make_agent: Callable[..., Path],
) -> None:
    agent = make_agent(SCRIPT, TWO_TOOLS)
    proc = subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "chat", "--agent", str(agent), "--json", "-p", "go"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        reader = Reader(proc.stdout.fileno())
        first = reader.expect(r"\{[^\n]*session\.started[^\n]*\}").group(0)
        sid = str(json.loads(first)["sessionId"])
        wait_for(lambda: Path("first-started").exists(), "the first tool to start")
        rt = Runtime(data_dir=data_dir(), load_agent=False)
        try:
            receipt = asyncio.run(rt.cancel(sid))
        finally:
            rt.close()
        assert receipt.disposition == "accepted"
        Path("release").write_text("")
        reader.expect("turn.cancelled")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
    assert not Path("second-ran").exists()
    assert tool_results(sid) == [("first", "first done"), ("second", "The turn was cancelled.")]
