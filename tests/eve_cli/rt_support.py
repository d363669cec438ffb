"""Helpers for runtime tests: agent folders written to disk, scripts for the scripted model."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from eve_cli.testing import call as call  # re-exported for the tests
from eve_cli.testing import reply as reply

AgentFactory = Callable[..., Path]


def write_agent(
    root: Path,
    *,
    script: list[dict[str, Any]] | dict[str, Any] | None = None,
    agent_args: str = "",
    tools: dict[str, str] | None = None,
    instructions: str = "You are a test agent.",
    subagents: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Write an agent folder under ``root``; a script makes its model ``scripted:<file>``."""
    root.mkdir(parents=True, exist_ok=True)
    model = ""
    if script is not None:
        script_path = root / "script.json"
        script_path.write_text(json.dumps(script))
        model = f"model={f'scripted:{script_path}'!r}, "
    (root / "agent.py").write_text(
        "from eve_cli import define_agent, Compaction, Limits\n\n"
        f"agent = define_agent({model}{agent_args})\n"
    )
    (root / "instructions.md").write_text(instructions)
    if tools:
        (root / "tools").mkdir(exist_ok=True)
        for name, body in tools.items():
            (root / "tools" / f"{name}.py").write_text(textwrap.dedent(body))
    for name, spec in (subagents or {}).items():
        write_agent(root / "subagents" / name, **spec)
    return root


@pytest.fixture
def make_agent(tmp_path: Path) -> AgentFactory:
    counter = iter(range(1000))

    def factory(**kwargs: Any) -> Path:
        return write_agent(tmp_path / f"agent{next(counter)}", **kwargs)

    return factory


def first_args(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """Patch ``owner.name`` (a function of one argument) to record each argument it is called
    with, calling the real one; the list the arguments go into."""
    seen: list[Any] = []
    real = getattr(owner, name)

    def recording(value: Any) -> Any:
        seen.append(value)
        return real(value)

    monkeypatch.setattr(owner, name, recording)
    return seen


def tool_file(body: str) -> str:
    """A tools/*.py body with the usual imports."""
    return "from eve_cli import tool, always, once, never, define_state, ToolContext\n" + (
        textwrap.dedent(body)
    )


# A tool `danger(x: int)` that asks for approval on every call (a session parks on it).
DANGER_TOOL = tool_file(
    """
    @tool(approval=always())
    def danger(x: int) -> int:
        \"\"\"Needs approval.\"\"\"
        return x
    """
)


# Differ between equal runs (a delivery id is where the delivery sits in its world: a
# PostgreSQL sequence number is not the same for two sessions; each run's agent folder names
# its own script file, so its code digest is its own).
_RUN_OWN = ("at", "index", "sessionId", "durationMs", "ck", "deliveryId", "agentDigest")


def brief(events: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """Events without times, deltas and checkpoint positions (``ck``: where each run's
    journal put its records): what must be equal between two runs."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if e["type"] == "message.appended":
            continue
        data = {k: v for k, v in e.items() if k not in _RUN_OWN}
        if e["type"] == "session.waiting":
            data.pop("continuationToken", None)
        out.append((e["type"], repr(sorted(data.items()))))
    return out


def types(events: Sequence[Mapping[str, Any]]) -> list[str]:
    return [e["type"] for e in events if e["type"] != "message.appended"]


# A child process that drives one session of a runtime and reports what it sees on stdout:
# "SID <id>" after creating, "EVENT <type>" for each event as it is appended, "VIEW <status>"
# at the end. argv: data_dir agent_dir action [sid] [text]; action is create | deliver | drive.
DRIVER = r"""
import asyncio, sys
from eve_cli.runtime import Runtime

def say(*words: object) -> None:
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()

async def main() -> None:
    data, agent, action = sys.argv[1:4]
    rt = Runtime(data_dir=data, agent_dir=agent)
    if action == "create":
        say("SID", await rt.create_session())
        return
    sid = sys.argv[4]
    if action == "deliver":
        say("RECEIPT", (await rt.deliver(sid, sys.argv[5])).disposition)
        return
    start = len(rt.events(sid))

    async def watch() -> None:
        async for event in rt.tail(sid, start):
            say("EVENT", event["type"])

    watcher = asyncio.create_task(watch())
    view = await rt.drive(sid)
    await asyncio.sleep(0.05)
    watcher.cancel()
    say("VIEW", view["status"])

asyncio.run(main())
"""


def side_effect_tool(log: Path) -> str:
    """A tool that appends to ``log``; when ``<log>.stall`` exists it removes it, says
    ``TOOL-STALL`` on stdout and hangs (so a test can kill the process mid-tool)."""
    return tool_file(f'''
        import os, sys, time
        LOG = {str(log)!r}

        @tool
        def record(text: str, ctx: ToolContext) -> str:
            """Record a text durably."""
            with open(LOG, "a") as f:
                f.write(f"start {{ctx.idempotency_key}}\\n")
            if os.path.exists(LOG + ".stall"):
                os.remove(LOG + ".stall")
                print("TOOL-STALL", flush=True)
                time.sleep(60)
            with open(LOG, "a") as f:
                f.write(f"end {{ctx.idempotency_key}}\\n")
            return f"recorded {{text}}"
    ''')
