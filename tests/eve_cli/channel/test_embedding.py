"""The embedding examples of docs/EMBEDDING.md run as written: eve's routes mounted in a
FastAPI application served by uvicorn (a real process on 127.0.0.1), and a plain asyncio
worker that goes on in its session across two runs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.eve_cli.channel.channel_support import (
    WAIT,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_eve_mounted_in_a_fastapi_application(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "embed_fastapi.py", tmp_path)
    agent = write_agent(tmp_path / "agent", write_script(tmp_path / "s.json", [reply("hi!")]))
    port = _free_port()
    env = {**os.environ, "EVE_AGENT": str(agent), "EVE_WORLD": str(tmp_path / "data")}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "embed_fastapi:app", "--port", str(port)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                own = httpx.get(f"{url}/hello", timeout=WAIT)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "not serving"
                time.sleep(0.1)
        assert own.json() == {"hello": "from the application"}
        created = httpx.post(f"{url}/agent/eve/v1/session", json={"message": "hello"}, timeout=WAIT)
        assert created.status_code == 202, created.text
        sid = created.json()["sessionId"]
        events = read_events(f"{url}/agent", sid, settled())
        assert [e.get("text") for e in events if e["type"] == "message.completed"] == ["hi!"]
        view = httpx.get(f"{url}/agent/eve/v1/session/{sid}", timeout=WAIT).json()
        assert view["status"] == "waiting"
        assert httpx.get(f"{url}/agent/eve/v1/ready", timeout=WAIT).json() == {"ready": True}
    finally:
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=WAIT)
    # uvicorn re-raises the SIGTERM it handled once it shut down cleanly.
    assert server.returncode in (0, -signal.SIGTERM), out
    assert "Application shutdown complete" in out and "Traceback" not in out
    assert (tmp_path / "data" / "runs" / sid).is_dir()  # the world the application named


def test_a_plain_asyncio_worker_goes_on_in_its_session(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "worker.py", tmp_path)
    chosen = ("EVE_AGENT", "EVE_WORLD", "EVE_DATA_DIR")  # the worker's defaults, in its folder
    env = {k: v for k, v in os.environ.items() if k not in chosen}

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "worker.py", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=WAIT * 2,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    sid, _, first = run("what time is it?").partition(": ")
    assert first.startswith("It is")
    again = run("count the words in the quick brown fox", sid)
    assert again.startswith(f"{sid}: ") and "4" in again
    assert (tmp_path / ".workflow-data" / "runs" / sid).is_dir()
