"""What model calls cost: US dollars per million tokens of known models, matched by prefix.

An agent folder may add or override entries in ``prices.json``::

    {"openai:my-model": {"input": 0.5, "output": 1.5, "cache_read": 0.05},
     "scripted": {"input": 1, "output": 2}}

A key is a whole model string or its beginning, with or without the provider
(``claude-sonnet-4`` matches ``anthropic:claude-sonnet-4-5``); the longest match wins, the
agent's entries before the shipped ones. A model with no entry has no cost (shown as unknown).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KNOWN_PRICES", "Price", "PriceTableError", "load_prices", "price_for"]


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens; cached reads and writes default to the input price."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, usage: Mapping[str, int]) -> float:
        """The cost of one call's recorded usage (``input``, ``output``, ``cacheRead``,
        ``cacheWrite``: the cached parts are billed at their own prices)."""
        read, write = usage.get("cacheRead", 0), usage.get("cacheWrite", 0)
        plain = max(0, usage.get("input", 0) - read - write)
        total = (
            plain * self.input
            + read * (self.input if self.cache_read is None else self.cache_read)
            + write * (self.input if self.cache_write is None else self.cache_write)
            + usage.get("output", 0) * self.output
        )
        return total / 1_000_000


def _anthropic(input: float, output: float) -> Price:
    # Cache reads cost a tenth of input, 5-minute cache writes a quarter more.
    return Price(input, output, cache_read=input / 10, cache_write=input * 1.25)


def _openai(input: float, output: float, cached: float) -> Price:
    return Price(input, output, cache_read=cached, cache_write=input)


KNOWN_PRICES: dict[str, Price] = {
    "anthropic:claude-opus-4-5": _anthropic(5, 25),
    "anthropic:claude-opus-4": _anthropic(15, 75),
    "anthropic:claude-3-opus": _anthropic(15, 75),
    "anthropic:claude-sonnet-4": _anthropic(3, 15),
    "anthropic:claude-3-7-sonnet": _anthropic(3, 15),
    "anthropic:claude-3-5-sonnet": _anthropic(3, 15),
    "anthropic:claude-haiku-4-5": _anthropic(1, 5),
    "anthropic:claude-3-5-haiku": _anthropic(0.8, 4),
    "anthropic:claude-3-haiku": _anthropic(0.25, 1.25),
    "openai:gpt-5": _openai(1.25, 10, 0.125),
    "openai:gpt-5-mini": _openai(0.25, 2, 0.025),
    "openai:gpt-5-nano": _openai(0.05, 0.4, 0.005),
    "openai:gpt-4.1": _openai(2, 8, 0.5),
    "openai:gpt-4.1-mini": _openai(0.4, 1.6, 0.1),
    "openai:gpt-4.1-nano": _openai(0.1, 0.4, 0.025),
    "openai:gpt-4o": _openai(2.5, 10, 1.25),
    "openai:gpt-4o-mini": _openai(0.15, 0.6, 0.075),
    "openai:o1": _openai(15, 60, 7.5),
    "openai:o3": _openai(2, 8, 0.5),
    "openai:o3-mini": _openai(1.1, 4.4, 0.55),
    "openai:o4-mini": _openai(1.1, 4.4, 0.275),
}
# The Responses API bills as Chat Completions does.
_ALIASES = {"openai-responses": "openai"}


def price_for(model: str, extra: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model`` (a model string): the longest matching key of ``extra``, else of
    :data:`KNOWN_PRICES`; None when neither knows it."""
    provider, _, name = model.partition(":")
    if extra:
        best = _longest(extra, (model, name) if name else (model,))
        if best is not None:
            return extra[best]
    best = _longest(KNOWN_PRICES, (f"{_ALIASES.get(provider, provider)}:{name}",))
    return KNOWN_PRICES[best] if best is not None else None


def _longest(table: Mapping[str, Price], names: tuple[str, ...]) -> str | None:
    """The longest key of ``table`` that begins one of ``names`` (None: no key does)."""
    # Plain loops: asked once a model call, over every key (no generator per key).
    best: str | None = None
    for key in table:
        if best is not None and len(key) <= len(best):
            continue
        for name in names:
            if name.startswith(key):
                best = key
                break
    return best


class PriceTableError(ValueError):
    """``prices.json`` cannot be used; the message is one line naming the file."""


def load_prices(path: Path) -> dict[str, Price]:
    """The entries of an agent folder's ``prices.json`` (none when it does not exist)."""
    if not path.is_file():
        return {}
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PriceTableError(f"{path}:1: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PriceTableError(f"{path}:1: must be an object of model -> prices")
    return {str(key): _price(path, str(key), value) for key, value in data.items()}


_FIELDS = ("input", "output", "cache_read", "cache_write")


def _price(path: Path, key: str, value: Any) -> Price:
    if not isinstance(value, dict) or not {"input", "output"} <= set(value):
        raise PriceTableError(f"{path}:1: {key!r} needs at least input and output prices")
    for name, number in value.items():
        if name not in _FIELDS:
            raise PriceTableError(
                f"{path}:1: {key!r}: unknown field {name!r} ({', '.join(_FIELDS)})"
            )
        if isinstance(number, bool) or not isinstance(number, int | float) or number < 0:
            raise PriceTableError(f"{path}:1: {key!r}: {name} must be a number of dollars >= 0")
    return Price(**{k: float(v) for k, v in value.items()})
