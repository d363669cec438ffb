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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["KNOWN_PRICES", "Price", "PriceTable", "PriceTableError", "load_prices", "price_for"]


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


_FOUND = 256  # lookups a table remembers (model strings: a process uses a few)


class PriceTable(Mapping[str, Price]):
    """Prices by key (read-only), indexed once by the keys' lengths: the longest key a model
    string begins with is found by looking up its beginnings of those lengths, longest first,
    not by trying every key at every step; and what a lookup found is kept (the table never
    changes), so a session's next steps find their model's price in one dict lookup."""

    def __init__(self, entries: Mapping[str, Price] | None = None) -> None:
        self._entries = dict(entries or {})
        self._order = {key: n for n, key in enumerate(self._entries)}  # the first of a tie wins
        self._lengths = sorted({len(key) for key in self._entries}, reverse=True)
        self._found: dict[tuple[str, ...], Price | None] = {}

    def __getitem__(self, key: str) -> Price:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"PriceTable({self._entries!r})"

    def longest(self, *names: str) -> Price | None:
        """The price of the longest key one of ``names`` (those not empty) begins with (of
        keys as long, the first in the table); None when no key matches."""
        try:
            return self._found[names]
        except KeyError:
            pass
        if len(self._found) >= _FOUND:
            self._found.clear()
        found = self._found[names] = self._search(names)
        return found

    def _search(self, names: tuple[str, ...]) -> Price | None:
        entries = self._entries
        for length in self._lengths:
            found = [n[:length] for n in names if n and len(n) >= length and n[:length] in entries]
            if found:
                return entries[min(found, key=self._order.__getitem__)]
        return None


KNOWN_PRICES = PriceTable(
    {
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
)
# The Responses API bills as Chat Completions does.
_ALIASES = {"openai-responses": "openai"}


def price_for(model: str, extra: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model`` (a model string): the longest key of ``extra`` that it or its
    name without the provider begins with, else of :data:`KNOWN_PRICES` (the provider's alias
    first: ``openai-responses`` bills as ``openai``); None when neither knows it. A
    `PriceTable` (what `load_prices` returns) is looked up by its index; another mapping is
    indexed for this call."""
    provider, _, name = model.partition(":")
    if extra:
        table = extra if isinstance(extra, PriceTable) else PriceTable(extra)
        if (found := table.longest(model, name)) is not None:
            return found
    return KNOWN_PRICES.longest(f"{_ALIASES.get(provider, provider)}:{name}")


class PriceTableError(ValueError):
    """``prices.json`` cannot be used; the message is one line naming the file."""


def load_prices(path: Path) -> PriceTable:
    """The entries of an agent folder's ``prices.json`` (none when it does not exist), indexed
    for `price_for`."""
    if not path.is_file():
        return PriceTable()
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PriceTableError(f"{path}:1: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PriceTableError(f"{path}:1: must be an object of model -> prices")
    return PriceTable({str(key): _price(path, str(key), value) for key, value in data.items()})


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
