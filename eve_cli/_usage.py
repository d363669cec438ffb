"""Usage totals of a session, per turn and in all, from its ``step.completed`` events.

One reading for every reader (``eve inspect``, ``eve log``, the view): the tokens each step
recorded (``usage``) and its ``cost`` in US dollars, summed. A cost total is None while no step
had a price (a model absent from the price table), so "unknown" never reads as "$0".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

__all__ = ["USAGE_KEYS", "UsageTotals", "add_usage", "empty_usage", "format_usage", "usage_totals"]

USAGE_KEYS = (
    "inputTokens",
    "outputTokens",
    "cacheReadTokens",
    "cacheWriteTokens",
    "reasoningTokens",
)


class UsageTotals(TypedDict):
    """Tokens by kind (:data:`USAGE_KEYS`, zero ones left out but the first two), ``cost`` in
    dollars (None: no step had a price), and ``steps`` counted."""

    usage: dict[str, int]
    cost: float | None
    steps: int


def empty_usage() -> UsageTotals:
    """Totals of no step."""
    return {"usage": {"inputTokens": 0, "outputTokens": 0}, "cost": None, "steps": 0}


def add_usage(totals: UsageTotals, event: Mapping[str, Any]) -> None:
    """Add one ``step.completed`` event to ``totals``."""
    totals["steps"] += 1
    usage = event.get("usage")
    if isinstance(usage, dict):
        summed = totals["usage"]
        for key in USAGE_KEYS:
            value = usage.get(key)
            # An int (not a bool) other than 0; the exact type first (the fold asks at every
            # step, and the keys left out are None).
            if value and (type(value) is int or (isinstance(value, int) and value is not True)):
                summed[key] = summed.get(key, 0) + value
    cost = event.get("cost")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        totals["cost"] = (totals["cost"] or 0.0) + float(cost)


def usage_totals(events: Iterable[Mapping[str, Any]]) -> tuple[UsageTotals, dict[str, UsageTotals]]:
    """``(session totals, totals by turn id)`` of ``events``."""
    session = empty_usage()
    turns: dict[str, UsageTotals] = {}
    for event in events:
        if event.get("type") != "step.completed":
            continue
        add_usage(session, event)
        turn = event.get("turnId")
        if isinstance(turn, str):
            add_usage(turns.setdefault(turn, empty_usage()), event)
    return session, turns


def format_usage(totals: UsageTotals) -> str:
    """One line: ``1,234 in (1,000 cached) / 56 out (20 reasoning) · $0.0123``."""
    usage = totals["usage"]
    text = f"{usage.get('inputTokens', 0):,} in"
    cached = [
        f"{usage[k]:,} {word}"
        for k, word in (("cacheReadTokens", "cache read"), ("cacheWriteTokens", "cache write"))
        if usage.get(k)
    ]
    if cached:
        text += f" ({', '.join(cached)})"
    text += f" / {usage.get('outputTokens', 0):,} out"
    if usage.get("reasoningTokens"):
        text += f" ({usage['reasoningTokens']:,} reasoning)"
    cost = totals["cost"]
    return text + (f" · ${cost:.4f}" if cost is not None else " · cost unknown")
