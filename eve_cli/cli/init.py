"""`eve init [DIR]`: scaffold an agent folder ready for `eve chat --agent DIR`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eve_cli.cli._errors import CliError

_AGENT_PY = '''\
"""The agent definition: eve loads `agent` from this file.

Instructions come from instructions.md next to this file; tools from tools/*.py.
Change the model with `eve chat -m openai:gpt-4o-mini` or here (`model="anthropic:..."`).
The name is the agent's identity: its sessions continue wherever a folder of that name is
served (the folder moved, a release switched, a checkout at another path).
"""

from eve_cli import define_agent

agent = define_agent(name={name!r}, model="demo")
'''

_INSTRUCTIONS_MD = """\
You are a concise, helpful assistant.

Use your tools when they help: `count_words` counts the words of a text and `save_note` keeps a
note in ./notes/ (the user approves the first note of each session). When something is unclear,
ask the user with `ask_question`.
"""

_WORDS_PY = '''\
"""An example tool: the name comes from the function, the description from its docstring and
the argument schema from the type hints (the model's arguments are validated against them)."""

from eve_cli import tool


@tool
def count_words(text: str, min_length: int = 1) -> int:
    """Count the words in a text.

    Args:
        text: The text to count.
        min_length: Only count words at least this many characters long.
    """
    return sum(1 for word in text.split() if len(word) >= min_length)
'''

_NOTES_PY = '''\
"""A tool with a side effect: `approval=once()` asks the user the first time it is called in a
session; later calls in that session run without asking."""

from pathlib import Path

from eve_cli import ToolContext, once, tool


@tool(approval=once())
def save_note(text: str, ctx: ToolContext) -> str:
    """Save a note as a file in ./notes/.

    Args:
        text: The note to keep.
    """
    folder = Path("notes")
    folder.mkdir(exist_ok=True)
    # The idempotency key is the same if this call is re-run after a crash: no duplicate note.
    name = "".join(ch if ch.isalnum() else "-" for ch in ctx.idempotency_key)
    path = folder / f"note-{name}.md"
    path.write_text(text + "\\n", encoding="utf-8")
    return f"saved {path}"
'''

_EVAL_YAML = """\
# Eval cases: `eve eval` runs each case as a session and checks what the agent did.
# The format is in the README ("Evals"); `eve eval --help` lists the options.
cases:
  - name: counts-words
    messages: ["count the words in the quick brown fox"]
    expect:
      tools_called:
        - name: count_words
          arguments: {text: "the quick brown fox"}
      contains: "4"
      max_steps: 3

  - name: saves-a-note
    messages: ["remember to buy milk"]
    answers:
      - approve: true          # the approval save_note asks for
    stubs:                     # the tool is not run: no file is written
      - tool: save_note
        arguments: {text: ".*milk.*"}
        result: "saved notes/note-1.md"
    expect:
      tools_called: [save_note]
      not_contains: "error"
"""

FILES: dict[str, str] = {
    "agent.py": _AGENT_PY,
    "instructions.md": _INSTRUCTIONS_MD,
    "tools/words.py": _WORDS_PY,
    "tools/notes.py": _NOTES_PY,
    "evals/example.yaml": _EVAL_YAML,
}


def scaffold(target: Path) -> list[Path]:
    """Write the agent folder into `target`; refuses before writing if any file exists."""
    if target.exists() and not target.is_dir():
        raise CliError(f"{target} exists and is not a directory; choose another DIR")
    existing = [target / rel for rel in FILES if (target / rel).exists()]
    if existing:
        names = ", ".join(str(p) for p in existing)
        raise CliError(f"refusing to overwrite existing files: {names}; choose an empty DIR")
    written = []
    try:
        for rel, text in FILES.items():
            if rel == "agent.py":
                text = text.format(name=target.resolve().name)
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("x", encoding="utf-8") as handle:
                handle.write(text)
            written.append(path)
    except OSError as exc:
        raise CliError(f"cannot write the agent folder {target}: {exc.strerror or exc}") from None
    return written


def init(
    directory: Annotated[
        Path, typer.Argument(metavar="[DIR]", help="Folder to create (default ./agent).")
    ] = Path("agent"),
) -> None:
    """Scaffold an agent folder: agent.py, instructions.md, two example tools and two eval
    cases."""
    written = scaffold(directory)
    for path in written:
        typer.echo(f"created {path}")
    typer.echo(f"\nnext: eve chat --agent {directory}")
    typer.echo(f"      eve eval --agent {directory}   (runs evals/example.yaml)")


def register(app: typer.Typer) -> None:
    app.command("init")(init)
