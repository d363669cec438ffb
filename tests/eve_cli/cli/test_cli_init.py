"""`eve init`: the scaffolded folder and its refusal to overwrite."""

from __future__ import annotations

import ast
from pathlib import Path

from typer.testing import CliRunner

from eve_cli.cli.app import app
from eve_cli.cli.init import FILES

runner = CliRunner()


def test_init_scaffolds_an_agent_folder(isolated: Path) -> None:
    result = runner.invoke(app, ["init", "my-agent"])
    assert result.exit_code == 0, result.output
    folder = isolated / "my-agent"
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(
        FILES
    )
    assert "eve chat --agent my-agent" in result.stdout
    agent = (folder / "agent.py").read_text()
    assert "define_agent(" in agent
    tools = {p.name: ast.parse(p.read_text()) for p in (folder / "tools").glob("*.py")}
    functions = [
        node
        for tree in tools.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
    ]
    # Every example tool has a docstring and typed arguments.
    for fn in functions:
        assert ast.get_docstring(fn), fn.name
        assert all(arg.annotation is not None for arg in fn.args.args), fn.name
    assert "approval=once()" in (folder / "tools" / "notes.py").read_text()


def test_init_defaults_to_agent_folder(isolated: Path) -> None:
    result = runner.invoke(app, ["init"])
    assert result.exit_code == 0
    assert (isolated / "agent" / "agent.py").is_file()


def test_init_refuses_to_overwrite(isolated: Path) -> None:
    folder = isolated / "mine"
    folder.mkdir()
    (folder / "agent.py").write_text("# my own work\n")
    result = runner.invoke(app, ["init", "mine"])
    assert result.exit_code == 1
    assert "refusing to overwrite existing files" in result.stderr
    assert "mine/agent.py" in result.stderr
    assert (folder / "agent.py").read_text() == "# my own work\n"
    assert not (folder / "tools").exists()


def test_init_onto_a_file_is_a_clear_error(isolated: Path) -> None:
    (isolated / "taken").write_text("x")
    result = runner.invoke(app, ["init", "taken"])
    assert result.exit_code == 1
    assert result.stderr.startswith("eve: error: taken exists and is not a directory")
