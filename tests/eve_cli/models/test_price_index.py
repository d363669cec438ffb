"""`price_for` looks a model up in an index of the table (built once, when the table is made),
not by trying every key: the same price as the scan it replaced, for any table and model
string (prefixes with and without the provider, the longest key first, the first of keys as
long, the agent's table before the shipped one, `openai-responses` billed as `openai`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from eve_cli.models import Price, PriceTable, load_prices, price_for
from eve_cli.models._prices import _ALIASES, KNOWN_PRICES


def scanned(model: str, extra: Mapping[str, Price] | None = None) -> Price | None:
    """The price as the scan of every key found it (before the index)."""
    provider, _, name = model.partition(":")
    shipped = f"{_ALIASES.get(provider, provider)}:{name}"
    for table, names in ((extra or {}, (model, name)), (dict(KNOWN_PRICES), (shipped,))):
        best = max(
            (key for key in table if any(n.startswith(key) for n in names if n)),
            key=len,
            default=None,
        )
        if best is not None:
            return table[best]
    return None


PIECES = [
    "",
    ":",
    "openai",
    "openai-responses",
    "anthropic",
    "gpt-4o",
    "-mini",
    "claude-",
    "o3",
    "x",
]
texts = st.lists(st.sampled_from(PIECES), max_size=4).map("".join)
tables = st.dictionaries(texts, st.builds(Price, st.integers(0, 9), st.integers(0, 9)), max_size=6)


@given(model=texts, extra=tables)
def test_the_index_finds_what_the_scan_found(model: str, extra: dict[str, Price]) -> None:
    assert price_for(model, extra) is scanned(model, extra)
    assert price_for(model, PriceTable(extra)) is scanned(model, extra)


def test_shipped_models_and_their_dated_names_cost_as_before() -> None:
    for key in KNOWN_PRICES:
        name = key.partition(":")[2]
        for model in (key, f"{key}-2025-01-01", f"openai-responses:{name}", name, f"{key}x"):
            assert price_for(model) is scanned(model), model
    tie = {"openai": Price(1, 1), "gpt-5-": Price(2, 2)}  # as long: the first key wins
    assert price_for("openai:gpt-5-mini", tie) is tie["openai"] is scanned("openai:gpt-5-mini", tie)
    anything = {"": Price(3, 3)}  # the empty key matches every model string
    assert price_for("demo", anything) is anything[""]


def test_a_loaded_table_is_indexed_once(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"scripted": {"input": 1, "output": 2}}')
    table = load_prices(path)
    assert isinstance(table, PriceTable) and dict(table) == {"scripted": Price(1, 2)}
    assert price_for("scripted:/a/b.json", table) is table["scripted"]
    assert price_for("scripted:x", {}) is None and price_for("scripted:x", PriceTable()) is None
