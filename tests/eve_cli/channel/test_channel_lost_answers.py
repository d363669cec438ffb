"""Answers the channel must not lose or get wrong: a create retried by its operationId after
the server died between the session and its message, the disk full under a request, and
exceptions of no known meaning (bugs) answered as the 500s they are."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    ServerThread,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)

API = "/eve/v1"


def start(agent: Path, faults: str = "") -> tuple[subprocess.Popen[str], str]:
    """`eve start` (with `EVE_FAULTS` armed); returns the process and its URL."""
    env = {**os.environ, "EVE_FAULTS": faults} if faults else dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "start", "--port", "0", "--agent", str(agent)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(WAIT)
    match = re.search(r"serving (http://\S+)", line[0] if line else "")
    if match is None:
        proc.kill()
        raise AssertionError(f"no serving line: {line} {proc.communicate(timeout=WAIT)[1]}")
    return proc, match.group(1)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=WAIT)


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    script = write_script(tmp_path / "script.json", [reply(f"reply {i}") for i in range(6)])
    return write_agent(tmp_path / "agent", script)


def received(url: str, sid: str) -> list[str]:
    stream = httpx.get(
        f"{url}{API}/session/{sid}/stream", params={"follow": "false"}, timeout=WAIT
    ).text
    events = [json.loads(line) for line in stream.splitlines() if line.strip()]
    return [str(e.get("text")) for e in events if e["type"] == "message.received"]


def test_an_operation_retried_after_a_kill_at_its_create_stores_its_message_once(
    agent: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """The create's journal record holds the message (write 1): killed before it, the retry
    creates the session; a retry of that (its answer lost) finds the session and its message,
    and delivers nothing again. The message is received once."""
    body = {"message": "the protected message", "operationId": "op-7"}
    proc, url = start(agent, faults="crash_before_write@1")
    processes.append(proc)
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"{url}{API}/session", json=body, timeout=WAIT)
    assert proc.wait(WAIT) == -signal.SIGKILL
    proc, url = start(agent)
    processes.append(proc)
    retried = httpx.post(f"{url}{API}/session", json=body, timeout=WAIT)
    assert retried.status_code == 202, retried.text
    answer = retried.json()
    assert answer["created"] is True and answer["disposition"] == "started", answer
    sid = answer["sessionId"]
    read_events(url, sid, settled())
    # Retried again (the answer got lost too): nothing more is delivered.
    again = httpx.post(f"{url}{API}/session", json=body, timeout=WAIT).json()
    assert again == {"sessionId": sid, "created": False}
    follow = httpx.post(f"{url}{API}/session/{sid}", json={"message": "next"}, timeout=WAIT)
    assert follow.status_code == 202
    events = read_events(
        url, sid, lambda e: e["type"] == "message.received" and e["text"] == "next"
    )
    read_events(url, sid, settled(), start=events[-1]["index"] - 1)
    assert received(url, sid) == ["the protected message", "next"]


def test_a_full_disk_is_a_507_saying_nothing_was_lost(
    agent: Path, processes: list[subprocess.Popen[str]]
) -> None:
    proc, url = start(agent, faults="enospc@1")  # the create (with its message) finds it full
    processes.append(proc)
    body = {"message": "hello", "operationId": "op-full"}
    response = httpx.post(f"{url}{API}/session", json=body, timeout=WAIT)
    assert response.status_code == 507, response.text
    error = response.json()["error"]
    assert error["code"] == "insufficient_storage"
    assert (
        "No space left" in error["message"] and "nothing stored before was lost" in error["message"]
    )
    assert "journal.msgpack" in error["message"]  # names the file
    # Space is back (the fault was one write): the same create now delivers the message.
    retried = httpx.post(f"{url}{API}/session", json=body, timeout=WAIT).json()
    assert retried["disposition"] == "started"
    read_events(url, retried["sessionId"], settled())
    assert received(url, retried["sessionId"]) == ["hello"]
    assert proc.poll() is None


class _Buggy:
    """A runtime whose deliveries hit a bug of the given kind (everything else is real)."""

    def __init__(self, runtime: Any, error: Exception) -> None:
        self._runtime = runtime
        self._error = error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def deliver(self, *args: Any, **kwargs: Any) -> Any:
        raise self._error


@pytest.mark.parametrize(
    "error", [KeyError("s_internal"), TypeError("unhashable"), ValueError("bad"), LookupError()]
)
def test_a_bug_is_a_logged_500_never_a_client_error(tmp_path: Path, error: Exception) -> None:
    from eve_cli.runtime import Runtime

    server = ServerThread(lambda: _Buggy(Runtime(data_dir=tmp_path / "data"), error)).start()
    try:
        sid = httpx.post(f"{server.url}{API}/session", json={}, timeout=WAIT).json()["sessionId"]
        response = httpx.post(
            f"{server.url}{API}/session/{sid}", json={"message": "x"}, timeout=WAIT
        )
        assert response.status_code == 500, response.text
        body = response.json()["error"]
        assert body["code"] == "internal" and type(error).__name__ in body["message"]
        assert "Traceback" not in response.text and "does not exist" not in response.text
    finally:
        server.stop()
    logged = "\n".join(server.logs)
    assert "Traceback" in logged and f"{type(error).__name__}" in logged and "deliver" in logged


def test_the_facades_errors_keep_their_answers(serve: Callable[..., ServerThread]) -> None:
    server = serve()
    unknown = httpx.post(f"{server.url}{API}/session/s_nope", json={"message": "x"}, timeout=WAIT)
    assert unknown.status_code == 404 and "does not exist" in unknown.json()["error"]["message"]
    assert not any("Traceback" in line for line in server.logs)
