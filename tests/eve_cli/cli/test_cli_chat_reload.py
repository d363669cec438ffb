"""`eve chat` while its agent folder is edited: a broken edit is one line before the next turn
(the last good definition serves it), said once, not a silent keep of the old code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.eve_cli.rt_support import reply, tool_file, write_agent

TOOLS = """
@tool
def ping() -> str:
    \"\"\"Answer pong.\"\"\"
    return "pong"
"""


def test_a_broken_edit_is_one_line_before_the_next_turn(tmp_path: Path) -> None:
    agent = write_agent(
        tmp_path / "agent",
        script=[reply("first"), reply("second"), reply("third")],
        tools={"t": tool_file(TOOLS)},
    )
    chat = subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "chat", "--agent", str(agent)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ),
    )  # fmt: skip
    assert chat.stdin is not None and chat.stdout is not None
    chat.stdin.write("one\n")
    chat.stdin.flush()
    assert chat.stdout.readline().strip() == "first"
    (agent / "tools" / "t.py").write_text("def broken(:\n")
    out, err = chat.communicate("two\nthree\n", timeout=120)
    assert chat.returncode == 0, err
    assert out.split() == ["second", "third"]  # the last good definition served both turns
    said = [line for line in err.splitlines() if "does not load" in line]
    assert len(said) == 1 and "t.py" in said[0], err
