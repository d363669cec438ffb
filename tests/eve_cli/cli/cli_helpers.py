"""Helpers shared by the command-line tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from typer.testing import Result

Eve = Callable[..., Result]
EveProc = Callable[..., subprocess.CompletedProcess[str]]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def data_dir() -> Path:
    return Path(os.environ["EVE_DATA_DIR"])


SLOW_TOOL = '''
import asyncio
from pathlib import Path

from eve_cli import tool


@tool
async def slow() -> str:
    """Wait the first time it runs (the test kills the process then); return at once after."""
    marker = Path("slow-started")
    runs = int(marker.read_text()) if marker.exists() else 0
    marker.write_text(str(runs + 1))
    if runs == 0:
        print("TOOL-STARTED", flush=True)
        await asyncio.sleep(60)
    return "slow done"
'''


class Reader:
    """Accumulates a file descriptor's output; `expect` waits (bounded) for a pattern."""

    ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.raw = b""
        self.pos = 0  # `expect` searches from here

    @property
    def text(self) -> str:
        return self.ANSI.sub("", self.raw.decode("utf-8", "replace"))

    def expect(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            match = regex.search(self.text, self.pos)
            if match:
                self.pos = match.end()
                return match
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"{pattern!r} not seen; output so far:\n{self.text}")

    def read_all(self, timeout: float = 30) -> str:
        """Everything until end of file (bounded), raw text."""
        deadline = time.monotonic() + timeout
        while self._read(max(0.0, deadline - time.monotonic())):
            pass
        return self.raw.decode("utf-8", "replace")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # the pty closes when the child exits
            return False
        self.raw += chunk
        return bool(chunk)


@contextlib.contextmanager
def chat_in_slow_tool(agent: Path) -> Iterator[str]:
    """A real `eve chat` process inside the agent's `slow` tool; yields the session id and
    kills the process with SIGKILL on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "chat", "--agent", str(agent), "--json", "-p", "go"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        reader = Reader(proc.stdout.fileno())
        first = reader.expect(r"\{[^\n]*session\.started[^\n]*\}").group(0)
        reader.expect("TOOL-STARTED")
        yield str(json.loads(first)["sessionId"])
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()


class Terminal:
    """`eve` in a real pseudo-terminal that is its controlling terminal (so a typed Ctrl-C
    is a SIGINT, as for a person); `out` reads the screen, `type` writes keys."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        import fcntl
        import pty
        import struct
        import termios

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        environ = {**os.environ, "TERM": "xterm", "COLUMNS": "120", "LINES": "40",
                   "PYTHONIOENCODING": "utf-8", "LANG": "C.UTF-8",
                   # No one answers the line editor's cursor-position request here.
                   "PROMPT_TOOLKIT_NO_CPR": "1", **(env or {})}  # fmt: skip

        def own_terminal() -> None:  # in the child, after setsid: the pty becomes its tty
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eve_cli", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=environ,
            close_fds=True,
            start_new_session=True,
            preexec_fn=own_terminal,
        )
        os.close(slave)
        self.fd = master
        self.out = Reader(master)

    def type(self, keys: str | bytes) -> None:
        os.write(self.fd, keys.encode() if isinstance(keys, str) else keys)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        os.close(self.fd)


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Wait (bounded) until `check()` is true: a condition, not a guessed sleep."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# The message prompt as the screen shows it (the line editor moves the cursor past its space).
PROMPT = "›"


# Tool A marks that it started and waits for the test's release file; tool B marks that it ran.
TWO_TOOLS = '''
import asyncio
from pathlib import Path

from eve_cli import tool


@tool
async def first() -> str:
    """Start, then wait for the release file."""
    marker = Path("first-started")
    marker.write_text(str(int(marker.read_text() or 0) + 1) if marker.exists() else "1")
    for _ in range(3000):
        if Path("release").exists():
            break
        await asyncio.sleep(0.02)
    return "first done"


@tool
def second() -> str:
    """Leave a mark."""
    Path("second-ran").write_text("yes")
    return "second done"
'''

# Two tool calls in one answer, then an answer a cancelled turn never gets to.
SCRIPT = [
    {"text": "", "tool_calls": [{"name": "first", "arguments": {}}, {"name": "second"}]},
    {"text": "never shown"},
]


def tool_results(sid: str) -> list[tuple[str, str]]:
    """(tool name, result) of every `action.result` of the session, in order."""
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", "inspect", sid, "--events", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [(e["name"], e["output"]) for e in events if e.get("type") == "action.result"]
