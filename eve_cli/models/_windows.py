"""Context windows (and Anthropic output limits) of known models, matched by longest prefix.

Dated or suffixed names (``gpt-4o-2024-08-06``, ``claude-3-5-sonnet-latest``) match their
family. An explicit ``context_window`` (from ``define_agent``) always wins.
"""

from __future__ import annotations

__all__ = ["DEFAULT_WINDOWS", "context_window_for", "max_output_tokens_for"]

_OPENAI_WINDOWS = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4": 8_192,
    "gpt-4-32k": 32_768,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    # Open-weight families commonly served through OpenAI-compatible servers.
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "llama-3.1": 131_072,
    "llama-3.3": 131_072,
    "qwen2.5": 32_768,
    "qwen3": 40_960,
    "mistral": 32_768,
    "deepseek-chat": 65_536,
    "deepseek-reasoner": 65_536,
}

_ANTHROPIC_WINDOWS = {"claude": 200_000}

# Output token caps for Anthropic's required ``max_tokens``.
_ANTHROPIC_MAX_OUTPUT = {
    "claude-3-haiku": 4_096,
    "claude-3-opus": 4_096,
    "claude-3-sonnet": 4_096,
    "claude-3-5": 8_192,
    "claude-3-7": 16_384,
    "claude-sonnet-4": 16_384,
    "claude-opus-4": 16_384,
    "claude-haiku-4": 16_384,
}

#: Window assumed for a model missing from the table, per provider. Unknown OpenAI-compatible
#: models are often small local ones: a small window compacts early rather than overflowing.
DEFAULT_WINDOWS = {"openai": 32_768, "anthropic": 200_000}
_DEFAULT_MAX_OUTPUT = 8_192


def _lookup(table: dict[str, int], model: str) -> int | None:
    name = model.lower().rsplit("/", 1)[-1]  # "meta-llama/llama-3.1-8b" → "llama-3.1-8b"
    best = ""
    for prefix in table:
        if name.startswith(prefix) and len(prefix) > len(best):
            rest = name[len(prefix) :]
            # "gpt-4" must not claim "gpt-4o": the prefix must end at a word boundary.
            if not rest or not rest[0].isalnum() or prefix[-1] in "-.":
                best = prefix
    return table[best] if best else None


def context_window_for(provider: str, model: str, override: int | None = None) -> int:
    """The context window of ``model`` at ``provider`` (``"openai"`` or ``"anthropic"``)."""
    if override is not None:
        if override <= 0:
            raise ValueError(f"context_window must be a positive number of tokens, not {override}")
        return override
    table = _ANTHROPIC_WINDOWS if provider == "anthropic" else _OPENAI_WINDOWS
    return _lookup(table, model) or DEFAULT_WINDOWS.get(provider, DEFAULT_WINDOWS["openai"])


def max_output_tokens_for(model: str) -> int:
    """A safe default ``max_tokens`` for an Anthropic model."""
    return _lookup(_ANTHROPIC_MAX_OUTPUT, model) or _DEFAULT_MAX_OUTPUT
