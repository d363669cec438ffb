"""Model providers, one module per provider, resolved from a model string.

``demo`` (offline, deterministic), ``scripted:PATH`` (a JSON script, for tests),
``openai:MODEL`` (Chat Completions), ``openai-responses:MODEL`` (Responses API, stateless),
``anthropic:MODEL`` (Messages API).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from eve_cli.models._base import (
    DeltaCallback,
    Message,
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    ProviderCall,
    Reasoning,
    ToolCall,
    ToolSpec,
    UnknownModelError,
    Usage,
)
from eve_cli.models._prices import Price, PriceTableError, load_prices, price_for
from eve_cli.models._script import ScriptCall, ScriptEntry, ScriptUsage
from eve_cli.models._settings import (
    GivenSettings,
    ModelReference,
    ModelSettings,
    as_settings,
    settings_problem,
)
from eve_cli.models._tokens import estimate_text, estimate_with, message_text, message_tokens
from eve_cli.models._windows import context_window_for

__all__ = [
    "DeltaCallback",
    "GivenSettings",
    "Message",
    "Model",
    "ModelError",
    "ModelReference",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "Price",
    "PriceTableError",
    "ProviderCall",
    "Reasoning",
    "ScriptCall",
    "ScriptEntry",
    "ScriptUsage",
    "ToolCall",
    "ToolSpec",
    "UnknownModelError",
    "Usage",
    "as_settings",
    "context_window_for",
    "estimate_text",
    "estimate_with",
    "load_prices",
    "message_text",
    "message_tokens",
    "price_for",
    "resolve_model",
    "settings_problem",
]

KNOWN_PREFIXES = (
    "demo",
    "scripted:PATH",
    "openai:MODEL",
    "openai-responses:MODEL",
    "anthropic:MODEL",
)


def resolve_model(
    model: str,
    *,
    context_window: int | None = None,
    env: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
    settings: ModelSettings | None = None,
) -> Model:
    """Build the provider for ``model``.

    Args:
        model: the model string.
        context_window: overrides the provider's known window (``define_agent`` may set it).
        env: where API keys and base URLs come from (defaults to the process environment plus
            ``.env`` / ``.env.local``); keys are held in memory only.
        base_dir: directory a relative ``scripted:PATH`` is resolved against.
        settings: temperature, reasoning, ... (the offline models ignore them).

    Raises:
        UnknownModelError: the string names no provider (the message lists the valid forms),
            or its provider takes none of a given setting.
    """
    if settings is not None and (problem := settings_problem(model, settings)):
        raise UnknownModelError(problem)
    kind, _, rest = model.partition(":")
    if kind == "demo" and not rest:
        from eve_cli.models.demo import DemoModel

        return DemoModel(context_window=context_window)
    if kind == "scripted" and rest:
        from eve_cli.models.scripted import ScriptedModel

        path = Path(rest)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        return ScriptedModel(path, context_window=context_window)
    if kind == "openai" and rest:
        from eve_cli.models.openai import OpenAIModel

        return OpenAIModel(rest, context_window=context_window, env=env, settings=settings)
    if kind == "openai-responses" and rest:
        from eve_cli.models.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel(rest, context_window=context_window, env=env, settings=settings)
    if kind == "anthropic" and rest:
        from eve_cli.models.anthropic import AnthropicModel

        return AnthropicModel(rest, context_window=context_window, env=env, settings=settings)
    raise UnknownModelError(f"unknown model {model!r}: use one of {', '.join(KNOWN_PREFIXES)}")
