"""Prompt caching against the fake Messages API: breakpoints on tools, system and the history,
each call reading what the one before wrote, at most 4 marks even after compaction."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.models.fake_anthropic import Answer, FakeAnthropic
from tests.eve_cli.rt_support import AgentFactory

NOTE_TOOL = (
    "from eve_cli import tool\n\n@tool\ndef note(text: str) -> str:\n"
    '    """Note."""\n    return "noted " + text\n'
)
SYSTEM = "Follow the house rules carefully. " * 120  # about 1,000 tokens


def marks(body: dict[str, Any]) -> int:
    return str(body).count("cache_control")


def test_each_call_reads_the_cache_the_previous_one_wrote(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    answers = [Answer(tools=[("note", {"text": "a"})]), Answer(text="Noted.")]
    answers += [Answer(text=f"Answer {n}.") for n in range(2, 12)]
    with FakeAnthropic(answers) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        agent = make_agent(
            agent_args="model='anthropic:claude-sonnet-4-5', context_window=5000, "
            "compaction=Compaction(threshold_percent=0.9, reserved_tokens=0)",
            tools={"note": NOTE_TOOL},
            instructions=SYSTEM,
        )

        async def main() -> list[dict[str, Any]]:
            rt = Runtime(agent_dir=agent, data_dir=tmp_path / "data")
            sid = await rt.create_session()
            for n in range(8):
                await rt.deliver(sid, f"message {n} " + "words " * 300)
                assert (await rt.drive(sid))["status"] == "waiting"
            return [dict(e) for e in rt.events(sid)]

        events = asyncio.run(main())
    assert fake.violations == []
    assert any(e["type"] == "compaction.completed" for e in events)  # the marks moved
    steps = [e["usage"] for e in events if e["type"] == "step.completed"]
    assert "cacheReadTokens" not in steps[0]  # nothing cached yet: written
    assert steps[0]["cacheWriteTokens"] == steps[0]["inputTokens"]
    for usage in steps[1:]:
        # Tools and system at least come from the cache on every later call.
        assert usage["cacheReadTokens"] >= 1000, usage
        full_price = (
            usage["inputTokens"] - usage["cacheReadTokens"] - usage.get("cacheWriteTokens", 0)
        )
        assert full_price == 0, usage
    turn_calls = [b for b in fake.requests if "thinking" not in b and b.get("tools")]
    assert all(marks(b) == 4 for b in turn_calls[2:])  # tools, system, two user turns


def test_caching_can_be_turned_off(
    make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with FakeAnthropic() as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        agent = make_agent(
            agent_args="model='anthropic:claude-sonnet-4-5', settings={'prompt_cache': False}"
        )

        async def main() -> None:
            rt = Runtime(agent_dir=agent, data_dir=tmp_path / "data")
            sid = await rt.create_session()
            for n in range(2):
                await rt.deliver(sid, f"hello {n}")
                await rt.drive(sid)

        asyncio.run(main())
    assert [marks(b) for b in fake.requests] == [0, 0]
