"""Where spans go (`OTEL_TRACES_EXPORTER`) and what an absent collector costs a command: a real
`eve chat -p` process, a port nobody listens on and a collector that accepts and never answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

# The SDK's own behaviour without eve's bound: four retries over ~8 s, then a failure line; a
# silent collector holds each request for its timeout (10 s). Either fails this bound.
BOUND = 6.0


def _chat(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", "chat", "-p", "hi"],
        cwd=cwd,
        env={**os.environ, "EVE_OTEL": "1", **env},
        capture_output=True,
        text=True,
        timeout=BOUND,
    )


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    done.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def _closed_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.parametrize("collector", ["closed", "silent"])
def test_an_absent_collector_costs_an_exit_one_line_not_retries(
    tmp_path: Path, silent_collector: str, collector: str
) -> None:
    endpoint = silent_collector if collector == "silent" else _closed_port()
    result = _chat(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result.returncode == 0, result.stderr
    assert "Hi!" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("eve: tracing: ") and "not exported" in lines[0]
    assert endpoint in lines[0] and "Transient" not in result.stderr


def test_console_writes_spans_to_stderr_and_none_drops_them(tmp_path: Path) -> None:
    shown = _chat(tmp_path, OTEL_TRACES_EXPORTER="console")
    assert shown.returncode == 0 and "Hi!" in shown.stdout
    assert '"name"' not in shown.stdout  # stdout stays the reply
    decoder = json.JSONDecoder()
    text, spans, at = shown.stderr, [], shown.stderr.find("{")
    while at >= 0:
        span, end = decoder.raw_decode(text, at)
        spans.append(span["name"])
        at = text.find("{", end)
    assert any(name.startswith("invoke_agent") for name in spans), spans
    assert any(name.startswith("chat") for name in spans), spans
    dropped = _chat(tmp_path, OTEL_TRACES_EXPORTER="none")
    assert dropped.returncode == 0 and dropped.stderr == ""
    odd = _chat(tmp_path, OTEL_TRACES_EXPORTER="none,jaeger")
    assert odd.returncode == 0
    assert odd.stderr.strip().splitlines() == [
        "eve: tracing: OTEL_TRACES_EXPORTER names 'jaeger', which eve does not know "
        "(it knows otlp, console, none): ignored"
    ]
