"""Cassettes (SPEC §15): a real run against an HTTP model server on 127.0.0.1 exported by `eve
export`, played by `-m scripted:CASSETTE`, made a three-line pytest regression test, and
checked by `eve replay` (exit 4); a live model's trajectory compared; secrets and redaction."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eve_cli._cassette import REDACTED, SECRET, cassette
from eve_cli._replay import play
from tests.eve_cli.models.scriptserver import Reply, ScriptServer, sse
from tests.eve_cli.rt_support import tool_file, write_agent

KEY = "sk-test-cassette-5e4d3c2b1a09"
TOOLS = """
@tool
def lookup(city: str) -> str:
    \"\"\"The weather of a city.\"\"\"
    return "sunny in " + city + " (key " + __import__("os").environ["OPENAI_API_KEY"] + ")"
"""


def _text(text: str) -> Reply:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": "stop"}
    return Reply(chunks=[sse({"choices": [choice]}), b"data: [DONE]\n\n"])


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
    frag = {"index": 0, "id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
    choice = {"index": 0, "delta": {"tool_calls": [frag]}, "finish_reason": "tool_calls"}
    return Reply(chunks=[sse({"choices": [choice]}), b"data: [DONE]\n\n"])


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    instance = ScriptServer()
    instance.start()
    monkeypatch.setenv("OPENAI_BASE_URL", instance.url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    try:
        yield instance
    finally:
        instance.stop()


def _eve(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", *args], input=stdin, capture_output=True, text=True,
        timeout=60, env=dict(os.environ),
    )  # fmt: skip


def test_a_real_run_becomes_a_cassette_and_a_three_line_regression_test(
    server: ScriptServer, tmp_path: Path
) -> None:
    server.add(_call("c1", "lookup", {"city": "Oslo"}), _text("It is sunny in Oslo."))
    server.add(_text("Bye!"))
    agent = write_agent(tmp_path / "agent", tools={"w": tool_file(TOOLS)},
                        agent_args="model='openai:gpt-4o'")  # fmt: skip
    ran = _eve("chat", "--agent", str(agent), "--json", stdin="weather in Oslo?\nthanks\n")
    assert ran.returncode == 0, ran.stderr
    sid = json.loads(ran.stdout.splitlines()[0])["sessionId"]
    tape = tmp_path / "tape.json"
    made = _eve("export", sid, "-o", str(tape), "--redact", r"Os(lo)")
    assert made.returncode == 0, made.stderr
    text = tape.read_text()
    assert KEY not in text and SECRET in text  # the key the tool echoed is not kept
    data = json.loads(text)
    assert [t["message"] for t in data["turns"]] == ["weather in Oslo?", "thanks"]
    assert data["turns"][0]["calls"][0]["arguments"] == {"city": REDACTED}
    assert [r.get("text") for r in data["responses"]] == ["", "It is sunny in Oslo.", "Bye!"]
    # `-m scripted:CASSETTE` plays the model's side: no request reaches the server.
    asked = len(server.requests)
    played = _eve("chat", "--agent", str(agent), "-m", f"scripted:{tape}", "--json",
                  stdin="weather in Oslo?\nthanks\n")  # fmt: skip
    assert played.returncode == 0, played.stderr
    replies = [json.loads(line).get("text") for line in played.stdout.splitlines()]
    assert "It is sunny in Oslo." in replies and "Bye!" in replies
    assert len(server.requests) == asked
    # The regression test, as the docs show it: three lines.
    (tmp_path / "test_recorded.py").write_text(
        "from eve_cli.testing import replay_cassette\n"
        "def test_recorded() -> None:\n"
        f"    assert replay_cassette({str(tape)!r}, agent={str(agent)!r}) == []\n"
    )
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    passed = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    (agent / "tools" / "w.py").write_text(tool_file(TOOLS.replace("city: str", "town: str")))
    failed = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert failed.returncode == 1 and "arguments-rejected" in failed.stdout, failed.stdout
    # `eve replay` says the same of the stored session: exit 4.
    replayed = _eve("replay", sid, "--json")
    assert replayed.returncode == 4, replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["diverged"] and report["sessions"][0]["divergences"][0]["turn"] == 1
    assert len(server.requests) == asked  # a replay asks no model
    every = _eve("replay", "--all")
    assert every.returncode == 4 and f"{sid}: 1 divergence(s)" in every.stdout, every.stdout


def test_a_live_models_trajectory_is_compared_with_the_recording(
    server: ScriptServer, tmp_path: Path
) -> None:
    agent = write_agent(tmp_path / "agent", tools={"w": tool_file(TOOLS)},
                        agent_args="model='openai:gpt-4o'")  # fmt: skip
    events: list[dict[str, Any]] = [
        {"type": "message.received", "turnId": "t1", "text": "weather?", "disposition": "started"},
        {"type": "message.completed", "turnId": "t1", "stepIndex": 0, "text": ""},
        {"type": "actions.requested", "turnId": "t1", "stepIndex": 0,
         "actions": [{"callId": "a", "name": "lookup", "arguments": {"city": "Oslo"}}]},
        {"type": "action.result", "turnId": "t1", "stepIndex": 0, "callId": "a",
         "status": "completed", "isError": False, "output": "sunny"},
        {"type": "message.completed", "turnId": "t1", "stepIndex": 1, "text": "Sunny."},
        {"type": "turn.completed", "turnId": "t1"},
    ]  # fmt: skip
    tape = cassette("s_x", events, agent="a", model="openai:gpt-4o")
    server.add(_call("z9", "lookup", {"city": "Oslo"}), _text("Sunny, says the tool."))
    same = asyncio.run(play(tape, agent, live_model="openai:gpt-4o"))
    assert same.divergences == []
    server.add(_call("z9", "lookup", {"city": "Bergen"}), _text("Rain."))
    moved = asyncio.run(play(tape, agent, live_model="openai:gpt-4o"))
    assert [(d.kind, d.turn) for d in moved.divergences] == [("trajectory", 1)]
    assert "Bergen" in moved.divergences[0].message
