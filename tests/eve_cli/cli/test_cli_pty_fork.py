"""`/rewind` and `/fork` in `eve chat` in a real pseudo-terminal (the demo model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from tests.eve_cli.cli.cli_helpers import PROMPT, Reader
from tests.eve_cli.cli.test_cli_pty import terminal  # noqa: F401 - the fixture

Terminal = Callable[..., tuple[subprocess.Popen[bytes], Reader, int]]


def _inspect(*args: str) -> Any:
    shown = subprocess.run(
        [sys.executable, "-m", "eve_cli", "inspect", *args, "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(shown.stdout)


def test_rewind_in_a_terminal_goes_on_in_a_fork_and_says_what_it_left(
    terminal: Terminal,  # noqa: F811 - the fixture imported above
) -> None:
    proc, out, fd = terminal()
    sid = out.expect(r"session\s+(\S+)").group(1)
    out.expect(PROMPT)
    os.write(fd, b"hello\r")
    out.expect("offline demo model")
    out.expect(PROMPT)
    os.write(fd, b"what time is it?\r")
    out.expect(r"It is \d{4}-")
    out.expect(PROMPT)
    os.write(fd, b"/rewind\r")
    match = out.expect(r"left behind 1 turn\(s\) of (\S+) \(“what time is it\?”\); now in (\S+),")
    assert match.group(1) == sid
    fork = match.group(2)
    out.expect(PROMPT)
    os.write(fd, b"count the words in a b c\r")
    out.expect("3 words")
    out.expect(PROMPT)
    os.write(fd, b"/fork\r")
    second = out.expect(r"now in (\S+), a fork of (\S+) at checkpoint 2").group(1)
    out.expect(PROMPT)
    os.write(fd, b"\x04")
    assert proc.wait(timeout=30) == 0
    original, forked = _inspect(sid), _inspect(fork)
    assert [t["message"] for t in original["turns"]] == ["hello", "what time is it?"]
    assert [t["message"] for t in forked["turns"]] == ["hello", "count the words in a b c"]
    assert original["forks"] == [fork] and forked["forks"] == [second]
    assert forked["forkedFrom"]["checkpoint"] == "1"
