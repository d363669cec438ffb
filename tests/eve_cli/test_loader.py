"""Agent folders: loading, the default agent, and errors that name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from eve_cli._loader import AgentLoadError, code_digest, load_agent
from tests.eve_cli.rt_support import AgentFactory

TOOL = '''
from eve_cli import tool, once

@tool(approval=once())
def greet(name: str) -> str:
    """Greet someone."""
    return f"hello {name}"
'''


def test_default_agent_when_no_folder() -> None:
    agent = load_agent()
    assert agent.name == "default" and agent.model == "demo"
    assert {"get_current_time", "count_words", "save_note", "ask_question"} <= set(agent.tools)
    assert agent.tools["save_note"].approval.kind == "always"


def test_local_agent_folder_is_found(make_agent: AgentFactory, isolated: Path) -> None:
    folder = make_agent(tools={"greet": TOOL})
    (isolated / "agent").symlink_to(folder)
    agent = load_agent()
    assert agent.instructions == "You are a test agent."
    assert agent.tools["greet"].approval.kind == "once"
    assert agent.tools["greet"].description == "Greet someone."


def test_syntax_error_names_file_and_line(make_agent: AgentFactory) -> None:
    folder = make_agent(tools={"bad": "x = 1\ndef broken(:\n"})
    with pytest.raises(AgentLoadError, match=r"tools/bad\.py:2: syntax error"):
        load_agent(folder)


def test_tool_without_hints_names_file_and_line(make_agent: AgentFactory) -> None:
    body = "from eve_cli import tool\n\n\n@tool\ndef f(x):\n    return x\n"
    folder = make_agent(tools={"nohint": body})
    with pytest.raises(AgentLoadError, match=r"nohint\.py:4: .*'x' has no type hint"):
        load_agent(folder)


def test_duplicate_tool_names(make_agent: AgentFactory) -> None:
    folder = make_agent(tools={"a": TOOL, "b": TOOL})
    with pytest.raises(AgentLoadError, match=r"b\.py:\d+: duplicate tool name 'greet'.*a\.py"):
        load_agent(folder)


def test_unknown_model_names_agent_py_line(make_agent: AgentFactory) -> None:
    folder = make_agent(agent_args="model='gpt-4'")
    with pytest.raises(AgentLoadError, match=r"agent\.py:3: unknown model 'gpt-4'"):
        load_agent(folder)


def test_import_error_names_line(make_agent: AgentFactory) -> None:
    folder = make_agent(tools={"imp": "import json\nimport not_a_module_xyz\n"})
    with pytest.raises(AgentLoadError, match=r"imp\.py:2: ModuleNotFoundError"):
        load_agent(folder)


def test_subagent_needs_instructions(make_agent: AgentFactory) -> None:
    folder = make_agent(subagents={"helper": {"instructions": "  "}})
    with pytest.raises(AgentLoadError, match=r"sub-agent 'helper' has no instructions"):
        load_agent(folder)


def test_subagents_load(make_agent: AgentFactory) -> None:
    folder = make_agent(subagents={"researcher": {"instructions": "Find facts."}})
    agent = load_agent(folder)
    assert agent.subagents["researcher"].description == "Find facts."


def test_the_code_digest_covers_code_only_and_not_where_it_sits(tmp_path: Path) -> None:
    first = tmp_path / "a" / "agent"
    (first / "tools").mkdir(parents=True)
    (first / "agent.py").write_text("from eve_cli import define_agent\nagent = define_agent()\n")
    (first / "tools" / "t.py").write_text("X = 1\n")
    before = code_digest(first)
    for hidden in (".workflow-data", ".venv", "tools/__pycache__"):
        (first / hidden).mkdir(parents=True, exist_ok=True)
        (first / hidden / "noise.json").write_text("{}")
    assert code_digest(first) == before  # caches and hidden folders are not code
    elsewhere = tmp_path / "b" / "agent"
    elsewhere.parent.mkdir()
    first.rename(elsewhere)
    assert code_digest(elsewhere) == before  # the same code anywhere
    (elsewhere / "tools" / "t.py").write_text("X = 2\n")
    assert code_digest(elsewhere) != before
