"""`eve chat` in a real pseudo-terminal: Rich rendering, a tool call, an approval answered `a`."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.eve_cli.cli.cli_helpers import PROMPT, Reader


@pytest.fixture
def terminal() -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Reader, int]]]:
    procs: list[tuple[subprocess.Popen[bytes], int]] = []

    def start(*args: str) -> tuple[subprocess.Popen[bytes], Reader, int]:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**os.environ, "TERM": "xterm", "COLUMNS": "120", "LINES": "40",
               "PYTHONIOENCODING": "utf-8", "LANG": "C.UTF-8",
               "PROMPT_TOOLKIT_NO_CPR": "1"}  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "eve_cli", "chat", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
        )
        os.close(slave)
        procs.append((proc, master))
        return proc, Reader(master), master

    yield start
    for proc, master in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        os.close(master)


def test_chat_in_a_terminal(
    terminal: Callable[..., tuple[subprocess.Popen[bytes], Reader, int]],
) -> None:
    proc, out, fd = terminal()
    banner = out.expect(r"session\s+(\S+)")
    sid = banner.group(1)
    out.expect("/help")
    out.expect(PROMPT)
    os.write(fd, b"what time is it?\r")
    out.expect(r"✓ get_current_time\(\)")
    out.expect(r"It is \d{4}-")
    out.expect(PROMPT)
    os.write(fd, b"remember to buy milk\r")
    out.expect(r'approval to run save_note\(text="buy milk"\)')
    out.expect(r"\[y\]es / \[n\]o / \[a\]lways")
    os.write(fd, b"a\r")
    out.expect(r"approved \(always\)")
    out.expect(r"✓ save_note\(text=\"buy milk\"\)")
    out.expect("saved note 1: buy milk")
    out.expect(PROMPT)
    # Approved "always": the next call runs without asking.
    os.write(fd, b"remember to buy eggs\r")
    out.expect("saved note 2: buy eggs")
    assert "[y]es" not in out.text[out.text.index("buy eggs") :]
    out.expect(PROMPT)
    os.write(fd, b"/help\r")
    out.expect("/compact")
    out.expect(PROMPT)
    os.write(fd, b"\x04")  # Ctrl-D at the prompt exits
    assert proc.wait(timeout=30) == 0
    assert sid in out.text


def test_ctrl_c_during_a_turn_cancels_it_durably(
    terminal: Callable[..., tuple[subprocess.Popen[bytes], Reader, int]],
    make_agent: Callable[..., Path],
) -> None:
    # The first model call sends one character, then waits 30 s before asking for a tool: the
    # cancel stops it at once (a turn that ended by itself would take 30 s), so neither the
    # tool nor the second answer is ever produced.
    echo = (
        "from eve_cli import tool\n\n\n@tool\ndef echo(text: str) -> str:\n"
        '    """Echo the text."""\n    return text\n'
    )
    agent = make_agent(
        [
            {
                "text": "Zzz",
                "delay": 30,
                "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}],
            },
            {"text": "never shown"},
        ],
        echo,
    )
    proc, out, fd = terminal("--agent", str(agent))
    sid = out.expect(r"session\s+(\S+)").group(1)
    out.expect(PROMPT)
    os.write(fd, b"go\r")
    out.expect("Z")  # the first delta arrived; the model call is still running
    proc.send_signal(signal.SIGINT)
    out.expect("cancelling the turn")
    out.expect("turn cancelled", timeout=20)
    assert "✓ echo" not in out.text
    out.expect(PROMPT)
    proc.send_signal(signal.SIGINT)  # Ctrl-C at the prompt exits
    assert proc.wait(timeout=30) == 130
    view = subprocess.run(
        [sys.executable, "-m", "eve_cli", "inspect", sid, "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert json.loads(view.stdout)["turns"][0]["status"] == "cancelled"
    assert "never shown" not in out.text


def test_reopening_a_session_shows_where_it_stands(
    terminal: Callable[..., tuple[subprocess.Popen[bytes], Reader, int]],
) -> None:
    first = subprocess.run(
        [sys.executable, "-m", "eve_cli", "chat", "-p", "count the words in a b c"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert first.stdout == "That text has 3 words.\n"
    proc, out, fd = terminal("-c")
    out.expect("resumed session")
    out.expect("› count the words in a b c")
    out.expect("That text has 3 words.")
    out.expect(PROMPT)
    os.write(fd, b"\x04")
    assert proc.wait(timeout=30) == 0
