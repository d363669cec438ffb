"""`eve chat --url`: the same chat through a running `eve start` server (real processes)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.eve_cli.cli.cli_helpers import EveProc, Reader


@pytest.fixture
def server_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "start", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    try:
        yield Reader(proc.stdout.fileno()).expect(r"serving (http://\S+)").group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            proc.kill()
            proc.wait(timeout=10)
            proc.stdout.close()


def test_chat_through_a_server_parks_and_answers_like_in_process(
    eve_proc: EveProc, server_url: str
) -> None:
    first = eve_proc("chat", "--url", server_url, input="what time is it?\nremember to buy milk\n")
    assert first.returncode == 3, first.stderr
    assert re.match(r"It is \d{4}-", first.stdout)
    sid = re.search(r"session (\S+) is waiting for approval to run save_note", first.stderr)
    assert sid, first.stderr
    done = eve_proc("chat", "--url", server_url, "-s", sid.group(1), "--approve", "all")
    assert done.returncode == 0, done.stderr
    assert "saved note 1: buy milk" in done.stdout


def test_url_rejects_local_only_options_and_unreachable_servers(eve_proc: EveProc) -> None:
    both = eve_proc("chat", "--url", "http://127.0.0.1:9", "-m", "demo", "-p", "hi")
    assert both.returncode == 2
    assert "do not apply with --url" in both.stderr
    down = eve_proc("chat", "--url", "http://127.0.0.1:9", "-p", "hi")
    assert down.returncode == 1
    assert "Traceback" not in down.stderr
    assert down.stderr.count("\n") == 1
