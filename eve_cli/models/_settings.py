"""Model settings (temperature, reasoning, ...): one neutral form, each provider's own names.

An agent gives settings once (``define_agent(settings=...)``) and may give more with its model
(``define_agent(model=ModelReference("anthropic:...", reasoning="high"))``: those win). Each
provider says which settings it takes (:data:`SUPPORTED`); a setting the provider has no
parameter for is refused when the agent loads (:func:`settings_problem`), so a typo or a
mismatch is one clear line, not an HTTP 400 at the first turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, TypedDict

__all__ = [
    "EFFORT_BUDGETS",
    "SUPPORTED",
    "Effort",
    "ModelReference",
    "ModelSettings",
    "as_settings",
    "settings_problem",
]

Effort = Literal["low", "medium", "high"]
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high")
#: Thinking-token budgets an effort stands for where a provider takes a budget (Anthropic).
EFFORT_BUDGETS: dict[str, int] = {"low": 2_048, "medium": 8_192, "high": 24_576}
MIN_THINKING_BUDGET = 1_024  # Anthropic's minimum ``budget_tokens``


class GivenSettings(TypedDict, total=False):
    """The settings of a :class:`ModelSettings` that are set, by name."""

    temperature: float
    top_p: float
    max_tokens: int
    stop: Sequence[str]
    seed: int
    parallel_tool_calls: bool
    reasoning: Effort | int
    prompt_cache: bool


@dataclass(frozen=True)
class ModelSettings:
    """Sampling and reasoning settings of model calls; None leaves the provider's default.

    Args:
        temperature / top_p: sampling.
        max_tokens: the most output tokens one call may produce.
        stop: sequences that end the answer.
        seed: for providers that sample reproducibly.
        parallel_tool_calls: whether one answer may call several tools.
        reasoning: an effort (``"low"``, ``"medium"``, ``"high"``) or a thinking-token budget.
        prompt_cache: False turns off Anthropic's cache breakpoints (on by default; OpenAI
            caches on its own).
    """

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: Sequence[str] | None = None  # kept as a tuple
    seed: int | None = None
    parallel_tool_calls: bool | None = None
    reasoning: Effort | int | None = None
    prompt_cache: bool | None = None

    def __post_init__(self) -> None:
        _check_number("temperature", self.temperature, 0, 2)
        _check_number("top_p", self.top_p, 0, 1)
        if self.max_tokens is not None and not _positive_int(self.max_tokens):
            raise ValueError(f"max_tokens must be a whole number above 0, not {self.max_tokens!r}")
        if self.stop is not None:
            stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
            if not stop or not all(isinstance(s, str) and s for s in stop):
                raise ValueError(f"stop must be a non-empty string or list of them: {self.stop!r}")
            object.__setattr__(self, "stop", stop)
        seed = self.seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed must be a whole number, not {self.seed!r}")
        for name in ("parallel_tool_calls", "prompt_cache"):
            if getattr(self, name) not in (None, True, False):
                raise ValueError(f"{name} must be True or False")
        _check_reasoning(self.reasoning)

    def given(self) -> GivenSettings:
        """The settings that are set, by name."""
        out: GivenSettings = {}
        if self.temperature is not None:
            out["temperature"] = self.temperature
        if self.top_p is not None:
            out["top_p"] = self.top_p
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.stop is not None:
            out["stop"] = self.stop
        if self.seed is not None:
            out["seed"] = self.seed
        if self.parallel_tool_calls is not None:
            out["parallel_tool_calls"] = self.parallel_tool_calls
        if self.reasoning is not None:
            out["reasoning"] = self.reasoning
        if self.prompt_cache is not None:
            out["prompt_cache"] = self.prompt_cache
        return out

    def merged(self, over: ModelSettings) -> ModelSettings:
        """These settings with ``over``'s set ones winning."""
        return replace(self, **over.given())

    def thinking_budget(self) -> int | None:
        """The thinking-token budget ``reasoning`` stands for (None: no reasoning asked)."""
        if self.reasoning is None:
            return None
        if isinstance(self.reasoning, str):
            return EFFORT_BUDGETS[self.reasoning]
        return self.reasoning

    def effort(self) -> Effort | None:
        """The effort ``reasoning`` stands for (a budget maps to the nearest effort)."""
        if self.reasoning is None or isinstance(self.reasoning, str):
            return self.reasoning
        budget = self.reasoning
        return "low" if budget <= 4_096 else "medium" if budget <= 16_384 else "high"


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_number(name: str, value: Any, low: float, high: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low} to {high}, not {value!r}")


def _check_reasoning(value: Any) -> None:
    if value is None or value in EFFORTS:
        return
    if _positive_int(value) and value >= MIN_THINKING_BUDGET:
        return
    raise ValueError(
        f"reasoning must be 'low', 'medium', 'high' or a thinking budget of at least "
        f"{MIN_THINKING_BUDGET} tokens, not {value!r}"
    )


def as_settings(value: ModelSettings | Mapping[str, Any] | None) -> ModelSettings:
    """``ModelSettings`` from itself, a dict of its fields (unknown names refused) or None."""
    if value is None:
        return ModelSettings()
    if isinstance(value, ModelSettings):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"settings take ModelSettings(...) or a dict, not {value!r}")
    known = {f.name for f in fields(ModelSettings)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"unknown model setting {unknown[0]!r}: use {', '.join(sorted(known))}")
    return ModelSettings(**dict(value))


@dataclass(frozen=True)
class ModelReference:
    """A model string with settings of its own (they win over the agent's settings).

    ``ModelReference("anthropic:claude-sonnet-4-5", reasoning="high", temperature=1)``.
    """

    id: str
    settings: ModelSettings = field(default_factory=ModelSettings)

    def __init__(self, id: str, **settings: Any) -> None:
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "settings", as_settings(settings))


#: The settings each provider has a parameter for; ``reasoning`` as an effort (``effort``) or
#: a budget (``budget``). The offline models take every setting and ignore it.
SUPPORTED: dict[str, frozenset[str]] = {
    "openai": frozenset(
        {
            "temperature",
            "top_p",
            "max_tokens",
            "stop",
            "seed",
            "parallel_tool_calls",
            "effort",
            "prompt_cache",
        }
    ),
    "openai-responses": frozenset(
        {
            "temperature",
            "top_p",
            "max_tokens",
            "parallel_tool_calls",
            "effort",
            "budget",
            "prompt_cache",
        }
    ),
    "anthropic": frozenset(
        {
            "temperature",
            "top_p",
            "max_tokens",
            "stop",
            "parallel_tool_calls",
            "effort",
            "budget",
            "prompt_cache",
        }
    ),
}


def settings_problem(model: str, settings: ModelSettings) -> str | None:
    """Why ``model``'s provider cannot take ``settings`` (one line), or None when it can."""
    provider = model.partition(":")[0]
    supported = SUPPORTED.get(provider)
    if supported is None:
        return None
    for name, value in settings.given().items():
        key = name
        if name == "reasoning":
            key = "effort" if isinstance(value, str) else "budget"
        if key not in supported:
            if key == "budget":
                return (
                    f"{model}: {provider} models take no thinking budget (give reasoning as "
                    "'low', 'medium' or 'high')"
                )
            return f"{model}: {provider} models have no setting {name!r}"
    if provider == "anthropic" and settings.reasoning is not None:
        budget = settings.thinking_budget() or 0
        if settings.temperature not in (None, 1) or settings.top_p is not None:
            return f"{model}: with reasoning, anthropic models take temperature 1 and no top_p"
        if settings.max_tokens is not None and settings.max_tokens <= budget:
            return (
                f"{model}: max_tokens ({settings.max_tokens}) must exceed the thinking budget "
                f"({budget})"
            )
    return None
