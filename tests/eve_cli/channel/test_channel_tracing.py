"""A turn's trace across processes: `eve start` killed with SIGKILL during a tool call, started
again, finishes the turn in the same trace, under the same turn and step spans, every span
written once (SPEC §14)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from eve_cli import _tracing
from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    eventually,
    of_type,
    read_events,
    write_agent,
)
from tests.otlp_receiver import Receiver, Span

SLOW_TOOL = """
import time
from pathlib import Path

from eve_cli import tool

@tool
def slow(path: str) -> str:
    \"\"\"Slow the first time it runs (the test kills the server then).\"\"\"
    marker = Path(path)
    if not marker.exists():
        marker.write_text("started")
        time.sleep(60)
    return "done"
"""


def test_a_turn_resumed_after_sigkill_continues_its_trace(
    eve_process: Callable[..., EveProcess],
    receiver: Receiver,
    tmp_path: Path,
    world_spec: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(_tracing.ENV, "1")
    marker = tmp_path / "marker"
    script = tmp_path / "s.json"
    entries = [
        {"text": "", "tool_calls": [{"name": "slow", "arguments": {"path": str(marker)}}]},
        {"text": "all done", "tool_calls": []},
    ]
    script.write_text(json.dumps(entries))
    agent = write_agent(tmp_path / "agent", script, SLOW_TOOL)
    args = ("start", "--port", "0", "--agent", str(agent), "--world", world_spec)
    first = eve_process(*args)
    created = httpx.post(f"{first.url}/eve/v1/session", json={"message": "go"}, timeout=WAIT)
    sid = created.json()["sessionId"]
    assert eventually(marker.exists), "the tool never started"
    # The model call before the tool ended its span: it is exported before the kill.
    receiver.wait_for(lambda spans: any(s.name.startswith("chat ") for s in spans))
    first.signal(signal.SIGKILL)
    first.wait()

    second = eve_process(*args)  # resumes the in-flight turn at start-up
    read_events(second.url, sid, of_type("turn.completed"))
    spans = receiver.wait_for(lambda s: any(x.name.startswith("invoke_agent") for x in s))

    trace = f"{_tracing.trace_id(sid, 't1'):032x}"
    assert {s.trace_id for s in spans} == {trace}

    def named(prefix: str) -> list[Span]:
        return [s for s in spans if s.name.startswith(prefix)]

    [turn] = named("invoke_agent")
    assert turn.span_id == f"{_tracing.span_id(sid, 't1', 'turn'):016x}"
    assert turn.attributes["eve.turn.status"] == "completed"
    steps = {s.name: s for s in named("step ")}
    assert sorted(steps) == ["step t1.0", "step t1.1"]  # each written once
    assert {s.parent_id for s in steps.values()} == {turn.span_id}
    # The killed run of the tool never ended its span; the resumed run's is the only one.
    [tool] = named("execute_tool")
    assert tool.parent_id == steps["step t1.0"].span_id
    chats = sorted(named("chat "), key=lambda s: s.start_ns)
    assert [c.parent_id for c in chats] == [s.span_id for s in steps.values()]
    # The turn and its first step started in the killed process: their spans say so (their
    # starts are the stored events' times, to the millisecond).
    ms = 1_000_000
    assert turn.start_ns <= chats[0].start_ns + ms and chats[0].end_ns <= tool.start_ns
    assert steps["step t1.0"].start_ns <= chats[0].start_ns + ms
    assert turn.end_ns >= max(s.end_ns for s in spans)
