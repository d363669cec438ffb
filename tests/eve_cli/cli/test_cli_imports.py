"""The lazy boundary of the command line: a command imports only what it uses.

Each case runs one `eve` command in a fresh interpreter and lists the modules it imported; a
command module, the HTTP stack or Rich Markdown imported by a command that does not need it
fails here (startup time itself is measured by `benchmarks/cli_startup.py`, not by a test).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Runs `eve ARGS...` in this interpreter, then prints the imported module names as JSON.
PROBE = """
import json, sys
from eve_cli.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
sys.__stderr__.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""

HTTP = ("httpx", "httpcore", "h11", "uvicorn", "starlette", "eve_cli.channel")
PROVIDERS = ("eve_cli.models.openai", "eve_cli.models.anthropic", "eve_cli.models._http")
MCP_SDK = ("mcp", "mcp_types", "eve_cli.mcp._pool")  # ~1 s to import: only for MCP servers
OTHER_COMMANDS = tuple(
    f"eve_cli.cli.{name}"
    for name in ("chat", "inspect", "resume", "init", "serve", "gc", "doctor", "mcp")
)


def imported(*args: str, stdin: str = "") -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("MODULES ")]
    assert lines, proc.stderr
    return set(json.loads(lines[-1].removeprefix("MODULES ")))


def eve(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    """Run `eve ARGS...`; it must exit with ``code``."""
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code, done.stderr
    return done


def loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_inspect_on_an_empty_store_imports_no_runtime_rich_or_agent_api() -> None:
    modules = imported("inspect")
    assert "eve_cli.cli.inspect" in modules
    others = tuple(m for m in OTHER_COMMANDS if m != "eve_cli.cli.inspect")
    forbidden = (
        *HTTP,
        *PROVIDERS,
        *others,
        *MCP_SDK,
        "rich",
        "eve_cli.runtime",
        "eve_cli._agent_api",
    )
    assert loaded(modules, forbidden) == []


def test_inspect_of_sessions_imports_no_http_stack_providers_or_markdown() -> None:
    eve("chat", "-p", "hello")
    for args in (["inspect", "--json"], ["inspect"]):
        modules = imported(*args)
        assert "eve_cli.runtime" in modules  # the store was read
        forbidden = (*HTTP, *PROVIDERS, "rich.markdown", "eve_cli.cli.chat", "eve_cli.cli.serve")
        assert loaded(modules, forbidden) == [], args
    assert "rich" not in {m.split(".")[0] for m in imported("inspect", "--json")}


@pytest.mark.parametrize("how", ["print", "piped"])
def test_chat_without_a_terminal_imports_no_rich_or_http_stack(how: str) -> None:
    if how == "print":
        modules = imported("chat", "-m", "demo", "-p", "hello")
    else:
        modules = imported("chat", "-m", "demo", stdin="hello\nwhat time is it?\n")
    assert "eve_cli.models.demo" in modules  # the turn ran
    forbidden = (
        *HTTP,
        *PROVIDERS,
        *MCP_SDK,
        "rich",
        "eve_cli.cli._render_rich",
        "eve_cli.cli.serve",
    )
    assert loaded(modules, forbidden) == []


def test_the_command_table_names_each_command_of_each_module_in_help_order() -> None:
    """`COMMANDS` maps each name to the module that really defines it, and misses none."""
    import importlib

    import typer

    from eve_cli.cli.app import COMMANDS

    defined: list[str] = []
    for module_name in dict.fromkeys(COMMANDS.values()):
        group = typer.Typer()
        importlib.import_module(f"eve_cli.cli.{module_name}").register(group)
        names = [str(info.name) for info in group.registered_commands]
        assert all(COMMANDS[name] == module_name for name in names), (module_name, names)
        defined += names
    assert defined == list(COMMANDS)


def test_the_probe_sees_a_command_module() -> None:
    assert "eve_cli.cli.serve" in imported("start", "--help")


def test_read_only_commands_build_no_pydantic_converter_and_help_no_runtime() -> None:
    """Typer converts values with Pydantic adapters (a third of a short command's CPU):
    values that already have their type (an option left out, a default, a text argument, a
    path) are taken as they are (`eve_cli.cli._coerce`); `--help` lists every command without
    importing the runtime or the world."""
    eve("chat", "-p", "hello")
    sid = json.loads(eve("inspect", "--json").stdout)[0]["id"]
    for args in (["inspect", sid], ["--data", ".workflow-data", "log", sid], ["schedules"]):
        modules = imported(*args)
        assert "eve_cli.runtime" in modules, args  # the store was read
        assert "typer._adapters" not in modules, args
    modules = imported("--help")
    assert loaded(modules, ("eve_cli.runtime", "world", "typer._adapters")) == []


def test_a_value_that_needs_converting_is_converted_and_checked_as_before() -> None:
    """A number typed on the command line still goes through Typer's own converter: a bad one
    is the usage error it always was, a good one is taken as a number."""
    bad = eve("inspect", "s_x", "--events", "--start", "many", code=2)
    assert "--start" in bad.stderr and "Traceback" not in bad.stderr
    modules = imported("inspect", "s_x", "--events", "--start", "3")
    assert "typer._adapters" in modules  # converted by Typer's adapter


def test_commands_that_read_sessions_import_no_harness_tools_or_pydantic() -> None:
    """Reading a session needs its stored events and views, not what runs a turn: the harness,
    the workflows, the models' providers and the tools' argument models (Pydantic) are
    imported by the first turn a process runs, not by `inspect` or `log`."""
    eve("chat", "-p", "hello")
    sid = json.loads(eve("inspect", "--json").stdout)[0]["id"]
    running = (
        "eve_cli.harness",
        "eve_cli.execution._driver",
        "eve_cli.execution._turn",
        "eve_cli.execution._host",
        "pydantic",
    )
    for args in (["inspect"], ["inspect", sid], ["inspect", sid, "--events"], ["log", sid]):
        modules = imported(*args)
        assert "eve_cli.execution._view" in modules, args  # the session was read
        assert loaded(modules, running) == [], args
    # Listing the schedules reads their files and the agent's name, not its tools (issue: the
    # tools' Pydantic models were a tenth of the command's CPU).
    assert loaded(imported("schedules"), running) == []
    modules = imported("chat", "-m", "demo", "-p", "again")
    assert [name for name in running[:-1] if name not in modules] == []  # a turn imports them
