"""Fixtures of the channel tests (helpers live in `channel_support`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eve_cli.channel import ChannelSettings
from tests.eve_cli.channel.channel_support import WAIT, EveProcess, ServerThread, readline_bounded
from tests.otlp_receiver import receiver

__all__ = ["browser", "eve_process", "receiver", "serve", "tab"]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ServerThread]]:
    """Start a server over a real Runtime: ``serve(agent_dir, token=..., heartbeat=...)``."""
    from eve_cli.runtime import Runtime

    started: list[ServerThread] = []

    def start(agent_dir: Path | None = None, **settings: Any) -> ServerThread:
        data = Path(os.environ["EVE_DATA_DIR"])
        server = ServerThread(
            lambda: Runtime(data_dir=data, agent_dir=agent_dir), ChannelSettings(**settings)
        )
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def eve_process() -> Iterator[Callable[..., EveProcess]]:
    """Start ``python -m eve_cli <args>`` and wait for its "serving URL" line."""
    started: list[EveProcess] = []

    def start(*args: str) -> EveProcess:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eve_cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = readline_bounded(proc)
        match = re.search(r"serving (http://\S+)", line)
        if match is None:
            proc.kill()
            _, err = proc.communicate(timeout=WAIT)
            raise AssertionError(f"no serving line: {line!r} stderr: {err}")
        process = EveProcess(proc, match.group(1), [], line)
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the whole test session (a context per test keeps them apart)."""
    from tests.eve_cli.channel.browser_support import open_browser

    with open_browser() as chromium:
        yield chromium


@pytest.fixture
def tab(browser: Any) -> Iterator[Callable[..., Any]]:
    """``tab(**context_options)``: a page in a fresh context; its script must raise nothing."""
    from tests.eve_cli.channel.browser_support import Tab

    opened: list[Tab] = []

    def open_tab(**context: Any) -> Tab:
        opened.append(Tab(browser, **context))
        return opened[-1]

    yield open_tab
    errors = [e for t in opened for e in t.errors]
    for t in opened:
        t.close()
    assert not errors, f"the page's script raised: {errors}"
