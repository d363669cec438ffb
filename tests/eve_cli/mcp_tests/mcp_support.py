"""Helpers of the MCP tests: agent folders whose `mcp.json` runs the real test server
(`mcp_server.py`, stdio or Streamable HTTP on 127.0.0.1), what that server saw, and process
checks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.eve_cli.rt_support import AgentFactory

SERVER = Path(__file__).resolve().parent / "mcp_server.py"
WAIT = 20.0


def stdio_entry(ctl: Path, **extra: Any) -> dict[str, Any]:
    """An `mcpServers` entry running the test server over stdio, controlled by ``ctl``."""
    ctl.mkdir(parents=True, exist_ok=True)
    return {"command": sys.executable, "args": [str(SERVER), str(ctl)], **extra}


def mcp_agent(
    make_agent: AgentFactory,
    script: list[dict[str, Any]],
    servers: dict[str, dict[str, Any]],
    **kwargs: Any,
) -> Path:
    """An agent folder with a scripted model and ``servers`` in its `mcp.json`."""
    folder = make_agent(script=script, **kwargs)
    (folder / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    return folder


def calls(ctl: Path) -> Counter[str]:
    """What the server logged: `call <tool> <key>` and `done <tool> <key>` lines, counted."""
    log = ctl / "calls.log"
    return Counter(log.read_text().splitlines()) if log.exists() else Counter()


def pids(ctl: Path) -> list[int]:
    """Every server process started with this control folder."""
    found = ctl / "pids"
    return [int(p) for p in found.read_text().split()] if found.exists() else []


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "\nState:\tZ" not in status


def eventually(check: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_http_server(ctl: Path, port: int = 0) -> tuple[subprocess.Popen[bytes], str]:
    """The test server on Streamable HTTP at 127.0.0.1 (a process the test owns) and its URL
    (``port``: a given one, e.g. to start it again where it was)."""
    ctl.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(ctl), "--http", str(port)],
        stderr=subprocess.PIPE,
        env={**os.environ},
    )

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    assert eventually(listening), "the HTTP test server did not start"
    return proc, f"http://127.0.0.1:{port}/mcp"
