"""Reasoning that survives durability: thinking blocks kept byte-exact in history and sent back
(the fake Messages API refuses anything else), through tool loops, new turns and kill -9."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from eve_cli._events import Event
from eve_cli.execution import fold
from eve_cli.runtime import Runtime
from tests.eve_cli.models.fake_anthropic import Answer, FakeAnthropic
from tests.eve_cli.models.fake_responses import FakeResponses, Turn
from tests.eve_cli.rt_support import AgentFactory, side_effect_tool
from tests.eve_cli.test_durability import Proc

THOUGHT = "Let me think…  the user wants a note.\n  Ünïcode and trailing spaces  "
NOTE_TOOL = (
    "from eve_cli import tool\n\n@tool\ndef note(text: str) -> str:\n"
    '    """Note."""\n    return "noted " + text\n'
)


def thinking_agent(make_agent: AgentFactory, tools: dict[str, str], extra: str = "") -> Path:
    args = "model='anthropic:claude-sonnet-4-5', settings={'reasoning': 2048}" + extra
    return make_agent(agent_args=args, tools=tools)


def of_type(events: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [e for e in events if e["type"] == kind]


def streamed(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per step that showed reasoning, its ``reasoning.appended`` deltas joined, after
    checking each step's reasoning streamed before its answer and whole before it ended."""
    steps: dict[Any, list[Mapping[str, Any]]] = {}
    for event in events:
        steps.setdefault((event.get("turnId"), event.get("stepIndex")), []).append(event)
    out = []
    for step in steps.values():
        kinds = [e["type"] for e in step]
        if "reasoning.appended" not in kinds:
            continue
        last = max(i for i, k in enumerate(kinds) if k == "reasoning.appended")
        for answer in ("message.appended", "actions.requested", "reasoning.completed"):
            assert answer not in kinds[:last], kinds  # reasoning first, then the answer
        out.append("".join(e["delta"] for e in step if e["type"] == "reasoning.appended"))
    return out


def test_thinking_is_kept_and_sent_back_unchanged(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    answers = [
        Answer(thinking=THOUGHT, redacted=True, tools=[("note", {"text": "milk"})]),
        Answer(thinking="Noted; now answer.", text="Saved your note."),
        Answer(thinking="A second turn.", text="Hello again."),
    ]
    with FakeAnthropic(answers) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        agent = thinking_agent(make_agent, {"note": NOTE_TOOL})

        async def main() -> None:
            rt = Runtime(agent_dir=agent, data_dir=tmp_path / "data")
            sid = await rt.create_session()
            for text in ("note milk", "hi"):
                await rt.deliver(sid, text)
                assert (await rt.drive(sid))["status"] == "waiting"
            events = rt.events(sid)
            shown = of_type(events, "reasoning.completed")
            assert [e["text"] for e in shown] == [THOUGHT, "Noted; now answer.", "A second turn."]
            assert streamed(events) == [e["text"] for e in shown]  # as it streamed, once
            # The view shows the reasoning as it streams (read before its step completed).
            before = fold(sid, events[: shown[0]["index"]])
            assert before["turns"][0]["steps"][0]["reasoning"] == THOUGHT
            assert shown[0]["redacted"] is True
            stored = rt.history(sid)[1]["reasoning"]
            assert stored["blocks"][0]["thinking"] == THOUGHT  # byte-exact
            usage = of_type(events, "step.completed")[0]["usage"]
            assert usage["reasoningTokens"] > 0

        asyncio.run(main())
    assert fake.violations == []
    assert len(fake.requests) == 3
    last = fake.requests[-1]["messages"]
    assert [b["type"] for b in last[1]["content"]] == ["thinking", "redacted_thinking", "tool_use"]


def test_the_fake_refuses_a_tool_loop_without_its_thinking(tmp_path: Path) -> None:
    """The rule the tests above rely on: it is enforced (a dropped or changed block fails)."""
    import httpx

    with FakeAnthropic([Answer(thinking="t", tools=[("note", {})])]) as fake:
        base = {
            "model": "m",
            "max_tokens": 5000,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
        }
        tool_use = {"type": "tool_use", "id": "x", "name": "note", "input": {}}
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}
        for assistant in (
            [tool_use],
            [{"type": "thinking", "thinking": "t", "signature": "forged"}, tool_use],
        ):
            messages = [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": assistant},
                result,
            ]
            answer = httpx.post(fake.url + "/v1/messages", json={**base, "messages": messages})
            assert answer.status_code == 400
    assert len(fake.violations) == 2


@pytest.mark.slow
def test_thinking_survives_kill_9_mid_stream_and_mid_tool(
    make_agent: AgentFactory, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    answers = [
        Answer(
            thinking=THOUGHT, text="Recording it now", pause=3.0, tools=[("record", {"text": "a"})]
        ),
        Answer(thinking="The record is done.", text="Recorded."),
    ]
    with FakeAnthropic(answers) as fake:
        agent = thinking_agent(make_agent, {"rec": side_effect_tool(log)})
        data = str(tmp_path / "data")
        env = {"ANTHROPIC_BASE_URL": fake.url}
        rt = Runtime(data_dir=data, agent_dir=agent)
        sid = asyncio.run(rt.create_session())
        asyncio.run(rt.deliver(sid, "record a"))
        # Killed as its reasoning streams (its answer's text then pauses 3 s).
        Proc(data, str(agent), "drive", sid, env=env).kill_at("EVENT reasoning.appended")
        Path(str(log) + ".stall").write_text("")
        Proc(data, str(agent), "drive", sid, env=env).kill_at("TOOL-STALL")
        lines = Proc(data, str(agent), "drive", sid, env=env).finish()
        assert lines[-1] == "VIEW waiting", lines
        events = Runtime(data_dir=data, agent_dir=agent).events(sid)
    assert fake.violations == []
    final = fake.requests[-1]["messages"]
    assert final[1]["content"][0] == {
        "type": "thinking",
        "thinking": THOUGHT,
        "signature": final[1]["content"][0]["signature"],
    }
    texts = [e["text"] for e in of_type(events, "reasoning.completed")]
    assert texts == [THOUGHT, "The record is done."]
    # The killed call's reasoning was partly stored; its re-run stored only the rest.
    assert streamed(events) == texts


def test_responses_api_reasoning_items_travel_in_history(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    turns = [
        Turn("Plan: note it.", tools=[("note", {"text": "milk"})]),
        Turn("Done, say so.", text="Saved."),
        Turn("Greet back.", text="Hello again."),
    ]
    with FakeResponses(turns) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        agent = make_agent(
            agent_args="model='openai-responses:gpt-5', settings={'reasoning': 'medium'}",
            tools={"note": NOTE_TOOL},
        )

        async def main() -> None:
            rt = Runtime(agent_dir=agent, data_dir=tmp_path / "data")
            sid = await rt.create_session()
            for text in ("note milk", "hi"):
                await rt.deliver(sid, text)
                assert (await rt.drive(sid))["status"] == "waiting"
            events = rt.events(sid)
            texts = [e["text"] for e in of_type(events, "reasoning.completed")]
            assert texts == ["Plan: note it.", "Done, say so.", "Greet back."]
            assert streamed(events) == texts
            usage = of_type(events, "step.completed")[0]["usage"]
            assert (usage["cacheReadTokens"], usage["reasoningTokens"]) == (60, 20)
            assert [m["content"] for m in rt.history(sid) if m["role"] == "assistant"] == [
                "",
                "Saved.",
                "Hello again.",
            ]

        asyncio.run(main())
    assert fake.violations == []
    body = fake.requests[-1]
    assert body["store"] is False and body["reasoning"] == {"effort": "medium", "summary": "auto"}
    kinds = [i.get("type") or i.get("role") for i in body["input"]]
    assert kinds == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
        "user",
    ]


@pytest.mark.slow
def test_responses_reasoning_survives_kill_9_mid_tool(
    make_agent: AgentFactory, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    turns = [Turn("Record a.", tools=[("record", {"text": "a"})]), Turn("Done.", text="Recorded.")]
    with FakeResponses(turns) as fake:
        agent = make_agent(
            agent_args="model='openai-responses:o4-mini', settings={'reasoning': 'high'}",
            tools={"rec": side_effect_tool(log)},
        )
        data = str(tmp_path / "data")
        env = {"OPENAI_BASE_URL": fake.url}
        sid = asyncio.run(Runtime(data_dir=data, agent_dir=agent).create_session())
        asyncio.run(Runtime(data_dir=data, agent_dir=agent).deliver(sid, "record a"))
        Path(str(log) + ".stall").write_text("")
        Proc(data, str(agent), "drive", sid, env=env).kill_at("TOOL-STALL")
        lines = Proc(data, str(agent), "drive", sid, env=env).finish()
        assert lines[-1] == "VIEW waiting", lines
    assert fake.violations == []
    assert [i.get("type") for i in fake.requests[-1]["input"]][1:4] == [
        "reasoning",
        "function_call",
        "function_call_output",
    ]


def test_reasoning_content_of_compatible_servers_is_shown_and_kept(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.eve_cli.models.scriptserver import Reply, ScriptServer, sse

    def chunk(**delta: Any) -> bytes:
        return sse({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})

    server = ScriptServer()
    server.start()
    try:
        server.add(
            Reply(
                chunks=[
                    chunk(reasoning_content="Hmm, "),
                    chunk(reasoning_content="greet."),
                    chunk(content="Hello!"),
                    sse("[DONE]"),
                ]
            ),
            Reply(chunks=[chunk(content="Again."), sse("[DONE]")]),
        )
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        agent = make_agent(agent_args="model='openai:deepseek-reasoner'")

        async def main() -> None:
            rt = Runtime(agent_dir=agent, data_dir=tmp_path / "data")
            sid = await rt.create_session()
            for text in ("hi", "again"):
                await rt.deliver(sid, text)
                assert (await rt.drive(sid))["status"] == "waiting"
            [shown] = of_type(rt.events(sid), "reasoning.completed")
            assert shown["text"] == "Hmm, greet."
            assert streamed(rt.events(sid)) == ["Hmm, greet."]
            assert rt.history(sid)[1]["reasoning"] == {"format": "text", "text": "Hmm, greet."}

        asyncio.run(main())
        # Kept, not sent back: DeepSeek refuses reasoning_content in input messages.
        assert "reasoning_content" not in json.dumps(server.requests[-1].body)
    finally:
        server.stop()


def test_provider_executed_tools_are_kept_and_never_run_here(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import subprocess
    import sys

    answers = [Answer(searches=["eve durable"], text="Found it."), Answer(text="Still here.")]
    with FakeAnthropic(answers) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
        agent = make_agent(
            agent_args=f"model='anthropic:claude-sonnet-4-5', provider_tools=[{search!r}]"
        )
        data = tmp_path / "data"

        async def say(text: str, sid: str | None = None) -> str:
            rt = Runtime(agent_dir=agent, data_dir=data)  # a fresh runtime: as after a restart
            sid = sid or await rt.create_session()
            await rt.deliver(sid, text)
            assert (await rt.drive(sid))["status"] == "waiting"
            rt.close()
            return sid

        sid = asyncio.run(say("search"))
        asyncio.run(say("and now?", sid))
        events = Runtime(agent_dir=agent, data_dir=data).events(sid)
        inspected = subprocess.run(
            [sys.executable, "-m", "eve_cli", "inspect", sid, "--data", str(data)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert fake.violations == []
    assert fake.requests[0]["tools"][-1]["type"] == "web_search_20250305"
    sent = [b["type"] for b in fake.requests[1]["messages"][1]["content"]]
    assert sent == ["server_tool_use", "web_search_tool_result", "text"]  # replayed as recorded
    [asked] = of_type(events, "actions.requested")
    assert asked["actions"] == [
        {
            "callId": "srvtoolu_0",
            "name": "web_search",
            "arguments": {"query": "eve durable"},
            "providerExecuted": True,
        }
    ]
    [done] = of_type(events, "action.result")
    assert done["providerExecuted"] is True and done["status"] == "completed"
    assert "durationMs" not in done and "eve durable" in done["output"]
    assert inspected.returncode == 0, inspected.stderr
    assert "web_search" in inspected.stdout


def test_thinking_survives_compaction(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    answers = [Answer(thinking=f"thought {n} …", text=f"Answer {n}.") for n in range(12)]
    with FakeAnthropic(answers) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        agent = thinking_agent(
            make_agent, {"note": NOTE_TOOL},
            ", context_window=3000, compaction=Compaction(threshold_percent=0.9, "
            "reserved_tokens=0)",
        )  # fmt: skip

        async def main() -> list[Event]:
            rt = Runtime(agent_dir=agent, data_dir=tmp_path / "data")
            sid = await rt.create_session()
            for n in range(8):
                await rt.deliver(sid, f"message {n} " + "words " * 400)
                assert (await rt.drive(sid))["status"] == "waiting"
            return rt.events(sid)

        events = asyncio.run(main())
    assert fake.violations == []
    assert any(e["type"] == "compaction.completed" and e["status"] == "completed" for e in events)
    summaries = [b for b in fake.requests if "thinking" not in b]
    assert summaries and all("'thinking'" not in str(b["messages"]) for b in summaries)
    last = fake.requests[-1]["messages"]
    kept = [m for m in last if m["role"] == "assistant"]
    assert kept and all(m["content"][0]["type"] == "thinking" for m in kept)
