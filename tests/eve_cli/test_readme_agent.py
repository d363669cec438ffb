"""The README's "Writing an agent" example, written out file by file and run: its tools,
approval policies, state and progress work as the README says, and its sub-agent loads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from eve_cli.testing import call, reply

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_files() -> dict[str, str]:
    """The section's code blocks that start with a `# agent/...` path line, by path."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Writing an agent") : text.index("## Evals")]
    files = {}
    for block in re.findall(r"```python\n(.*?)```", section, re.DOTALL):
        first, _, body = block.partition("\n")
        if first.startswith("# agent/"):
            files[first.removeprefix("# ")] = body
    return files


def item(name: str, quantity: int | None = None) -> dict[str, object]:
    arguments: dict[str, object] = {"name": name}  # not call(): "name" is its own argument
    if quantity is not None:
        arguments["quantity"] = quantity
    return {"name": "add_item", "arguments": arguments}


def test_the_readme_agent_runs_as_documented(tmp_path: Path) -> None:
    files = readme_files()
    assert {"agent/agent.py", "agent/tools/shopping.py", "agent/subagents/pricer/agent.py"} <= set(
        files
    )
    for path, body in files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(body, encoding="utf-8")
    script = [
        reply("", item("milk", 2), item("eggs")),
        reply("Added."),
        reply("", call("show_list")),
        reply("Here it is."),
        reply("", call("order", count=2)),
        reply("Ordered."),
        reply("", call("clear_list")),
        reply("Cleared."),
    ]
    Path("script.json").write_text(json.dumps(script), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", "chat", "--agent", "agent", "-m", "scripted:script.json",
         "--approve", "all", "--json"],
        input="add milk and eggs\nshow me\norder two\nclear it\n",
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    results = [(e["name"], e["output"]) for e in events if e["type"] == "action.result"]
    assert results == [
        ("add_item", "1 items on the list"),
        ("add_item", "2 items on the list"),
        ("show_list", "2 x milk\n1 x eggs"),
        ("order", "ordered 2 items"),  # the policy approved a small order by itself
        ("clear_list", "the list is empty"),
    ]
    progress = [e.get("progress") for e in events if e["type"] == "action.result"][:2]
    assert progress == [["adding 2 x milk"], ["adding 1 x eggs"]]
    asked = [e.get("tool") for e in events if e["type"] == "input.requested"]
    assert asked == ["clear_list"]  # always() asked; --approve all answered
    assert "--approve all: approval to run clear_list(): approved" in done.stderr


def test_the_readme_agent_loads_with_its_sub_agent_and_typed_tools() -> None:
    for path, body in readme_files().items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(body, encoding="utf-8")
    from eve_cli._loader import load_agent

    agent = load_agent(Path("agent"))
    assert agent.subagents["pricer"].config.mode == "task"
    assert agent.subagents["pricer"].description == "Estimate what a shopping list costs."
    properties = agent.tools["add_item"].spec.parameters["properties"]
    assert isinstance(properties, dict)
    name, quantity = properties["name"], properties["quantity"]
    assert isinstance(name, dict) and name["type"] == "string"
    assert isinstance(quantity, dict) and quantity["type"] == "integer"
    assert agent.tools["add_item"].spec.parameters["required"] == ["name"]
    assert agent.tools["clear_list"].approval.kind == "always"
    assert agent.tools["order"].approval.kind == "callable"
