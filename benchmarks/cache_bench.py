"""Prompt caching: input tokens billed at full price, caching on against caching off.

A 50-turn conversation whose agent has a 4k-token system prompt runs against the fake
Messages API of the tests (``tests/eve_cli/models/fake_anthropic.py``: real HTTP on 127.0.0.1,
caching modelled as the API documents it: a breakpoint caches the prefix up to its block, a
request reads the longest cached prefix at one of its breakpoints). Once with eve's cache
breakpoints (the default), once with ``prompt_cache=False``.

* ``cache.full_price_input``: input tokens billed at full price over the session (neither read
  from nor written to the cache), caching on (``baseline``: caching off, where every input
  token is). Issue 34: ratio ≤ 0.15.
* ``cache.cost``: the session's input cost at Claude Sonnet prices (cache reads at a tenth,
  writes at 1.25×), caching on against off.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eve_cli.models import price_for
from eve_cli.runtime import Runtime

from . import measurement
from ._support import scratch

TURNS = 50
SYSTEM_TOKENS = 4_000
MODEL = "anthropic:claude-sonnet-4-5"


def _agent(folder: Path, cache: bool) -> Path:
    folder.mkdir(parents=True)
    (folder / "agent.py").write_text(
        "from eve_cli import define_agent\n\n"
        f"agent = define_agent(model={MODEL!r}, settings={{'prompt_cache': {cache}}})\n"
    )
    sentence = "Answer briefly and cite the house rules by number when they apply. "
    rules = "".join(f"Rule {n}: {sentence}" for n in range(SYSTEM_TOKENS * 4 // len(sentence)))
    (folder / "instructions.md").write_text(rules)
    return folder


def _session(root: Path, cache: bool, turns: int) -> dict[str, int]:
    from tests.eve_cli.models.fake_anthropic import FakeAnthropic

    totals = {"input": 0, "cacheRead": 0, "cacheWrite": 0, "output": 0}
    with FakeAnthropic() as fake:
        os.environ["ANTHROPIC_BASE_URL"] = fake.url
        agent = _agent(root / ("on" if cache else "off"), cache)
        rt = Runtime(agent_dir=agent, data_dir=root / f"data-{cache}")

        async def main() -> None:
            sid = await rt.create_session()
            for n in range(turns):
                await rt.deliver(sid, f"Question {n}: which rule applies to case {n}?")
                await rt.drive(sid)
            for event in rt.events(sid):
                usage: dict[str, Any] = event.get("usage") or {}
                if event["type"] == "step.completed":
                    totals["input"] += usage.get("inputTokens", 0)
                    totals["output"] += usage.get("outputTokens", 0)
                    totals["cacheRead"] += usage.get("cacheReadTokens", 0)
                    totals["cacheWrite"] += usage.get("cacheWriteTokens", 0)

        asyncio.run(main())
        rt.close()
        if fake.violations:
            raise RuntimeError(f"the fake API refused a request: {fake.violations[0]}")
    return totals


def run(quick: bool) -> Iterator[dict[str, Any]]:
    turns = 5 if quick else TURNS
    previous = os.environ.get("ANTHROPIC_BASE_URL")
    try:
        with scratch("cache") as root:
            on, off = _session(root, True, turns), _session(root, False, turns)
    finally:
        if previous is None:
            os.environ.pop("ANTHROPIC_BASE_URL", None)
        else:
            os.environ["ANTHROPIC_BASE_URL"] = previous
    full_on = on["input"] - on["cacheRead"] - on["cacheWrite"]
    yield measurement(
        "cache.full_price_input", full_on, "tokens", baseline=off["input"], turns=turns,
        cache_read=on["cacheRead"], cache_write=on["cacheWrite"], input_on=on["input"],
    )  # fmt: skip
    price = price_for(MODEL)
    assert price is not None
    yield measurement(
        "cache.cost", round(price.cost({**on, "output": 0}), 4), "USD",
        baseline=round(price.cost({**off, "output": 0}), 4),
    )  # fmt: skip
