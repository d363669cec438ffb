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
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eve_cli._replay import Divergence
from eve_cli.execution._view import SessionView
from eve_cli.runtime import Runtime
from world import MemoryWorld

__all__ = ["Divergence", "call", "chat", "memory_runtime", "replay_cassette", "reply",
           "write_script"]  # fmt: skip


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
