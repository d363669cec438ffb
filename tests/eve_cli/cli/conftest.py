"""Helpers for the command-line tests: run `eve` in-process (CliRunner) or as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from eve_cli.cli.app import app
from tests.eve_cli.cli.cli_helpers import Eve, EveProc, Terminal


@pytest.fixture
def eve() -> Eve:
    """`eve(*args, input=...)` through Typer's CliRunner (stdin is not a terminal)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(app, list(args), input=input)

    return invoke


@pytest.fixture
def eve_proc() -> EveProc:
    """`eve_proc(*args, input=...)`: `python -m eve_cli` as a real subprocess, bounded."""

    def run(*args: str, input: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "eve_cli", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture
def make_agent(tmp_path: Path) -> Callable[..., Path]:
    """An agent folder on a scripted model: `make_agent(script, tools_source)`."""

    def make(script: list[dict[str, Any]], tools: str = "", name: str = "agent") -> Path:
        folder = tmp_path / name
        (folder / "tools").mkdir(parents=True)
        (folder / "script.json").write_text(json.dumps(script))
        (folder / "agent.py").write_text(
            "from eve_cli import define_agent\n\n"
            f"agent = define_agent(model='scripted:script.json', name={name!r})\n"
        )
        if tools:
            (folder / "tools" / "tools.py").write_text(tools)
        return folder

    return make


@pytest.fixture
def terminal() -> Iterator[Callable[..., Terminal]]:
    """`terminal(*args, env=...)`: `eve ARGS` in a real pseudo-terminal, killed at the end."""
    started: list[Terminal] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Terminal:
        started.append(Terminal(*args, env=env))
        return started[-1]

    yield start
    for term in started:
        term.close()
