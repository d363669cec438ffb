"""Context windows, token estimates, retry settings and the delta relay."""

from __future__ import annotations

import asyncio
import email.utils

import pytest

from eve_cli.models import ModelRequest, ToolCall, resolve_model
from eve_cli.models._http import DeltaRelay, RetryPolicy, parse_retry_after
from eve_cli.models._tokens import estimate_text, estimate_usage
from eve_cli.models._windows import context_window_for, max_output_tokens_for


@pytest.mark.parametrize(
    ("provider", "model", "window"),
    [
        ("openai", "gpt-4o", 128_000),
        ("openai", "gpt-4o-mini-2024-07-18", 128_000),
        ("openai", "gpt-4", 8_192),
        ("openai", "gpt-4.1-mini", 1_047_576),
        ("openai", "o1-mini", 128_000),
        ("openai", "o3-mini", 200_000),
        ("openai", "llama3.1:8b", 131_072),
        ("openai", "meta-llama/Llama-3.1-8B-Instruct", 131_072),
        ("openai", "my-own-model", 32_768),
        ("anthropic", "claude-3-5-sonnet-latest", 200_000),
        ("anthropic", "anything", 200_000),
    ],
)
def test_known_windows(provider: str, model: str, window: int) -> None:
    assert context_window_for(provider, model) == window


def test_the_override_wins_and_reaches_the_model() -> None:
    assert context_window_for("openai", "gpt-4o", 5000) == 5000
    assert resolve_model("openai:gpt-4o", env={}).context_window == 128_000
    assert resolve_model("anthropic:claude-x", context_window=9000, env={}).context_window == 9000
    with pytest.raises(ValueError, match="positive"):
        context_window_for("openai", "gpt-4o", 0)


def test_anthropic_output_caps() -> None:
    assert max_output_tokens_for("claude-3-haiku-20240307") == 4_096
    assert max_output_tokens_for("claude-3-5-haiku-latest") == 8_192
    assert max_output_tokens_for("claude-sonnet-4-5") == 16_384


def test_token_estimate() -> None:
    assert estimate_text("") == 0
    assert estimate_text("abcd" * 10) == 10
    assert estimate_text("你好世界") == 4
    request = ModelRequest(system="s" * 40, messages=[{"role": "user", "content": "u" * 40}])
    usage = estimate_usage(request, "x" * 8, [ToolCall("c", "read", {"p": 1})])
    assert usage.estimated
    assert usage.input_tokens == 10 + 4 + 10 + 4
    assert usage.output_tokens == 2 + 1 + 2


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == 30.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after-ms": "x", "retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "-5"}) == 0.0
    assert parse_retry_after({}) is None


def test_policy_from_env_ignores_junk() -> None:
    policy = RetryPolicy.from_env(
        {
            "EVE_MODEL_MAX_RETRIES": "2",
            "EVE_MODEL_CHUNK_TIMEOUT": "1.5",
            "EVE_MODEL_RETRY_BASE_DELAY": "x",
        }
    )
    assert (policy.max_retries, policy.chunk_timeout, policy.base_delay) == (2, 1.5, 0.5)


def test_delta_relay_forwards_each_character_once_across_attempts() -> None:
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    async def main() -> None:
        relay = DeltaRelay(on_delta)
        for part in ("ab", "cd"):
            await relay(part)
        relay.restart()  # a retry streams "a", "bcdef"
        for part in ("a", "bcdef"):
            await relay(part)
        relay.restart()  # a retry that says something else is held back
        for part in ("xyz", "abcdefg"):
            await relay(part)

    asyncio.run(main())
    assert seen == ["ab", "cd", "ef"]
