"""Model settings: each provider's own parameters, and a setting it lacks refused at load."""

from __future__ import annotations

from typing import Any

import pytest

from eve_cli import ModelReference, ModelSettings, define_agent
from eve_cli._loader import AgentLoadError, load_agent
from eve_cli.models import ModelRequest, ToolSpec, UnknownModelError, resolve_model
from eve_cli.models._http import RetryPolicy
from tests.eve_cli.models.scriptserver import Reply, ScriptServer, generate, sse
from tests.eve_cli.rt_support import AgentFactory

TOOLS = [ToolSpec("read", "Read a file", {"type": "object", "properties": {}})]
REQUEST = ModelRequest(system="s", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)


def openai_reply() -> Reply:
    chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    return Reply(chunks=[sse(chunk), sse("[DONE]")])


def anthropic_reply() -> Reply:
    def ev(kind: str, **data: Any) -> bytes:
        return sse({"type": kind, **data}, event=kind)

    return Reply(
        chunks=[
            ev("message_start", message={"usage": {"input_tokens": 3, "output_tokens": 1}}),
            ev("content_block_start", index=0, content_block={"type": "text", "text": "ok"}),
            ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1}),
            ev("message_stop"),
        ]
    )


def sent(server: ScriptServer, model: str, settings: ModelSettings, reply: Reply) -> Any:
    env = {"OPENAI_BASE_URL": server.url, "ANTHROPIC_BASE_URL": server.url}
    server.add(reply)
    found = resolve_model(model, env=env, settings=settings)
    found.retry = RetryPolicy(max_retries=0)  # type: ignore[attr-defined]
    generate(found, REQUEST)
    return server.requests[-1].body


def test_chat_completions_names(server: ScriptServer) -> None:
    settings = ModelSettings(
        temperature=0.3,
        top_p=0.9,
        max_tokens=50,
        stop=["END"],
        seed=7,
        parallel_tool_calls=False,
        reasoning="high",
    )
    body = sent(server, "openai:qwen3", settings, openai_reply())
    assert {k: body[k] for k in settings.given() if k in body} == {
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["END"],
        "parallel_tool_calls": False,
        "max_tokens": 50,
    }
    assert body["reasoning_effort"] == "high"


def test_messages_api_names_and_thinking(server: ScriptServer) -> None:
    settings = ModelSettings(stop="END", parallel_tool_calls=False, reasoning=4000)
    body = sent(server, "anthropic:claude-sonnet-4-5", settings, anthropic_reply())
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert body["max_tokens"] > 4000
    assert body["stop_sequences"] == ["END"]
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    plain = sent(
        server,
        "anthropic:claude-3-haiku",
        ModelSettings(temperature=0.2, top_p=0.5),
        anthropic_reply(),
    )
    assert (plain["temperature"], plain["top_p"], plain["max_tokens"]) == (0.2, 0.5, 4096)
    assert "thinking" not in plain and "tool_choice" not in plain
    # An effort stands for a budget; the model's output cap is raised above it.
    high = sent(
        server, "anthropic:claude-3-haiku", ModelSettings(reasoning="high"), anthropic_reply()
    )
    assert high["max_tokens"] > high["thinking"]["budget_tokens"] == 24_576


def test_bad_values_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="temperature must be a number from 0 to 2"):
        ModelSettings(temperature=3)
    with pytest.raises(ValueError, match="reasoning must be 'low', 'medium', 'high'"):
        ModelSettings(reasoning="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown model setting 'temprature'"):
        define_agent(settings={"temprature": 1})  # type: ignore[arg-type]
    with pytest.raises(UnknownModelError, match="claude-x: anthropic models have no setting"):
        resolve_model("anthropic:claude-x", env={}, settings=ModelSettings(seed=1))


def test_a_setting_the_provider_lacks_fails_at_load(make_agent: AgentFactory) -> None:
    folder = make_agent(agent_args="model='anthropic:claude-x', settings={'seed': 3}")
    with pytest.raises(AgentLoadError, match=r"agent\.py:3: .*anthropic .* no setting 'seed'"):
        load_agent(folder)
    folder = make_agent(agent_args="model='openai:gpt-4o', settings={'reasoning': 2048}")
    with pytest.raises(AgentLoadError, match=r"agent\.py:3: .*openai .* no thinking budget"):
        load_agent(folder)


def test_the_model_reference_wins_for_its_model_only() -> None:
    config = define_agent(
        model=ModelReference("openai:gpt-4o", temperature=0.1, seed=2),
        settings={"temperature": 0.9, "top_p": 0.5},
    )
    assert config.model == "openai:gpt-4o"
    from eve_cli._loader import AgentDefinition

    agent = AgentDefinition("a", __import__("pathlib").Path("."), config, "", {})
    assert agent.settings_for("openai:gpt-4o").given() == {
        "temperature": 0.1,
        "top_p": 0.5,
        "seed": 2,
    }
    assert agent.settings_for("anthropic:claude-x").given() == {"temperature": 0.9, "top_p": 0.5}


def test_cached_and_reasoning_tokens_are_read_from_chat_usage(server: ScriptServer) -> None:
    usage = {
        "prompt_tokens": 900,
        "completion_tokens": 70,
        "prompt_tokens_details": {"cached_tokens": 768},
        "completion_tokens_details": {"reasoning_tokens": 50},
    }
    chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    server.add(Reply(chunks=[sse(chunk), sse({"choices": [], "usage": usage}), sse("[DONE]")]))
    model = resolve_model("openai:gpt-4o", env={"OPENAI_BASE_URL": server.url})
    response, _ = generate(model, REQUEST)
    assert response.usage.as_record() == {
        "input": 900,
        "output": 70,
        "cacheRead": 768,
        "reasoning": 50,
    }
