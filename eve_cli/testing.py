"""Helpers for testing agents: an in-memory runtime and scripted model answers.

```python
from eve_cli.testing import call, chat, memory_runtime, reply, write_script

model = write_script(tmp_path / "script.json", [reply("", call("add", a=1, b=2)), reply("3")])
rt = memory_runtime("agent", model=model)
sid = await rt.create_session()
view = await chat(rt, sid, "add 1 and 2")
```

A recorded conversation as a regression test (``eve export SESSION -o tests/hello.json``):

```python
from eve_cli.testing import replay_cassette

def test_hello_still_behaves_as_recorded() -> None:
    assert replay_cassette("tests/hello.json", agent="agent") == []
```

The agent folder's eval cases (``evals/*.yaml``, ``eve eval``) from pytest, and the same
expectations on any run (``pytest_plugins = ["eve_cli.testing"]`` in ``conftest.py`` gives the
``eval_case`` fixture):

```python
from eve_cli.testing import expect, run_eval_case

def test_counts_words() -> None:
    run = run_eval_case("counts-words", agent="agent")
    assert run.passed, run.failures
    assert expect(run, contains="4", tools_not_called=["save_note"]) == []

def test_with_the_fixture(eval_case) -> None:
    run = eval_case("counts-words")  # ./agent, or override the eval_agent fixture
    assert run.view["status"] == "waiting"
```
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eve_cli._replay import Divergence
from eve_cli.evals import CaseRun
from eve_cli.execution import SessionView
from eve_cli.runtime import Runtime
from world import MemoryWorld

try:  # the `eval_case` fixture, for a suite that names this module in `pytest_plugins`
    import pytest
except ImportError:  # pragma: no cover - pytest is not needed for the rest
    pytest = None  # type: ignore[assignment]

__all__ = ["CaseRun", "Divergence", "call", "chat", "eval_case", "expect", "memory_runtime",
           "replay_cassette", "reply", "run_eval_case", "write_script"]  # fmt: skip


def memory_runtime(agent_dir: Path | str | None = None, *, model: str | None = None) -> Runtime:
    """A runtime on an in-memory world (nothing written to disk; gone with the process)."""
    return Runtime(agent_dir=agent_dir, model=model, world=MemoryWorld())


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A tool call for a scripted answer."""
    return {"name": name, "arguments": arguments}


def reply(text: str = "", *calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """One scripted model answer: text and tool calls (``delay=``, ``error=`` for tests)."""
    return {"text": text, "tool_calls": list(calls), **extra}


def write_script(path: Path | str, entries: list[dict[str, Any]]) -> str:
    """Write a script for the scripted model; returns the model string ``scripted:PATH``."""
    target = Path(path).resolve()
    target.write_text(json.dumps(entries, indent=1), encoding="utf-8")
    return f"scripted:{target}"


async def chat(rt: Runtime, sid: str, message: str) -> SessionView:
    """Deliver a message and drive the session until it waits; returns the session view."""
    receipt = await rt.deliver(sid, message)
    if receipt.disposition == "rejected":
        raise RuntimeError(f"message rejected: {receipt.reason}")
    return await rt.drive(sid)


def replay_cassette(
    path: Path | str, agent: Path | str | None = None, *, live_tools: Iterable[str] = ()
) -> list[Divergence]:
    """Replay the cassette at ``path`` (``eve export``) against the agent folder ``agent``
    (default: ``./agent``, else the built-in one) with its recorded model answers and tool
    results (``live_tools``: run these for real); the divergences, empty when the agent
    behaves as recorded. `eve_cli._cassette.CassetteError` for a file that is no cassette."""
    import asyncio

    from eve_cli._cassette import load
    from eve_cli._replay import play

    report = asyncio.run(play(load(path), agent, live_tools=live_tools))
    return report.divergences


def run_eval_case(
    name: str,
    agent: Path | str | None = None,
    *,
    model: str | None = None,
    judge_model: str | None = None,
) -> CaseRun:
    """Run the eval case ``name`` of the agent folder ``agent`` (default ``./agent``) as a
    session on an in-memory world, as `eve eval` would: its stubs, answers and expectations
    (``model``: instead of the case's; ``judge_model``: for a judge naming none). The run has
    ``passed``, ``failures``, ``reply``, ``tool_calls``, ``events`` and ``view``.

    Raises:
        eve_cli.evals.CaseErrors: a mistake in a case file; ValueError: no such case.
    """
    import asyncio

    from eve_cli.evals import EvalOptions, load_cases, run_case
    from eve_cli.evals._runner import serve_stubs

    rt = memory_runtime(agent)
    try:
        cases = [c for c in load_cases(rt.agent.directory, rt.agent) if c.name == name]
        if not cases:
            raise ValueError(f"no eval case {name!r} in {rt.agent.directory / 'evals'}")
        book = serve_stubs(rt, cases)
        options = EvalOptions(model=model, judge_model=judge_model)
        return asyncio.run(run_case(rt, cases[0], options=options, book=book))
    finally:
        rt.close()


def expect(run: CaseRun, **expectations: Any) -> list[str]:
    """The expectations a run misses, one line each; the keywords are those of a case's
    ``expect:`` (``contains=``, ``tools_called=``, ``max_steps=``, ``check=`` a function, ...;
    the judge is left to `run_eval_case`)."""
    from eve_cli.evals._expect import check_run
    from eve_cli.evals._parse import expectations_of

    return check_run(expectations_of(expectations), run)


if pytest is not None:

    @pytest.fixture
    def eval_agent() -> Path | None:
        """The agent folder `eval_case` runs cases of (None: ``./agent``); override it."""
        return None

    @pytest.fixture
    def eval_case(eval_agent: Path | None) -> Any:
        """A function running an eval case by name (see `run_eval_case`)."""

        def run(name: str, *, model: str | None = None) -> CaseRun:
            return run_eval_case(name, eval_agent, model=model)

        return run
