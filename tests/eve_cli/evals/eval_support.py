"""Agent folders with eval cases, for the `eve eval` tests."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from tests.eve_cli.rt_support import tool_file

# `echo` answers; `write_file` writes a file (a side effect a stub must prevent); `danger`
# asks for approval on every call.
TOOLS = tool_file(
    """
    from pathlib import Path

    @tool
    def echo(text: str) -> str:
        \"\"\"Echo a text.\"\"\"
        return f"echo: {text}"

    @tool
    def write_file(name: str, text: str) -> str:
        \"\"\"Write a file.\"\"\"
        Path(name).write_text(text)
        return f"wrote {name}"

    @tool(approval=always())
    def danger(x: int) -> int:
        \"\"\"Needs approval.\"\"\"
        return x * 2
    """
)


def eval_agent(
    root: Path,
    cases: dict[str, str],
    scripts: dict[str, list[dict[str, Any]]] | None = None,
    model: str = "demo",
    tools: str = TOOLS,
) -> Path:
    """``root/agent`` with ``tools`` and ``evals/<name>`` files (YAML or Python, dedented) and
    scripts ``evals/<name>.json`` for the scripted model."""
    agent = root / "agent"
    (agent / "tools").mkdir(parents=True, exist_ok=True)
    (agent / "evals").mkdir(exist_ok=True)
    (agent / "agent.py").write_text(
        f"from eve_cli import define_agent\n\nagent = define_agent(model={model!r})\n"
    )
    (agent / "tools" / "tools.py").write_text(tools)
    for name, text in cases.items():
        (agent / "evals" / name).write_text(textwrap.dedent(text).lstrip("\n"))
    for name, entries in (scripts or {}).items():
        (agent / "evals" / f"{name}.json").write_text(json.dumps(entries))
    return agent


def report_of(path: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def row(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in report["cases"] if r["name"] == name)
