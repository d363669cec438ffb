"""Event streams: replay from 0, N and -1, live tail, SSE with Last-Event-ID, heartbeats, clean
disconnects and clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    ServerThread,
    eventually,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)

API = "/eve/v1"


@pytest.fixture
def server(serve: Callable[..., ServerThread], tmp_path: Path) -> ServerThread:
    script = write_script(tmp_path / "s.json", [reply("first answer"), reply("second answer")])
    return serve(write_agent(tmp_path / "agent", script), heartbeat=0.2)


def settled_session(server: ServerThread) -> tuple[str, list[dict[str, Any]]]:
    """A session after one finished turn, with all its events."""
    sid = httpx.post(f"{server.url}{API}/session", json={"message": "hi"}, timeout=WAIT).json()[
        "sessionId"
    ]
    read_events(server.url, sid, settled())
    everything = replay(server, sid, 0)
    return sid, everything


def replay(server: ServerThread, sid: str, start: int) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{server.url}{API}/session/{sid}/stream",
        params={"startIndex": start, "follow": "false"},
        timeout=WAIT,
    )
    assert response.status_code == 200
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def test_ndjson_replay_from_zero_n_and_minus_one(server: ServerThread) -> None:
    sid, events = settled_session(server)
    assert [e["index"] for e in events] == list(range(len(events)))
    assert all(e["sessionId"] == sid for e in events)
    assert events[0]["type"] == "session.started"
    assert replay(server, sid, 3) == events[3:]
    assert replay(server, sid, -1) == events[-1:]
    assert replay(server, sid, -3) == events[-3:]
    assert replay(server, sid, -10_000) == events
    assert replay(server, sid, len(events) + 5) == []


def test_ndjson_headers_and_first_byte(server: ServerThread) -> None:
    sid, _events = settled_session(server)
    with httpx.stream("GET", f"{server.url}{API}/session/{sid}/stream", timeout=WAIT) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        assert response.headers["cache-control"] == "no-store"
        chunks = response.iter_bytes()
        assert next(chunks).startswith(b"\n")


def test_live_tail_after_replay(server: ServerThread) -> None:
    sid, events = settled_session(server)
    seen: list[dict[str, Any]] = []
    opened = threading.Event()

    def follow() -> None:
        url = f"{server.url}{API}/session/{sid}/stream"
        with httpx.stream("GET", url, params={"startIndex": 1}, timeout=WAIT) as response:
            for line in response.iter_lines():
                opened.set()
                if line.strip():
                    seen.append(json.loads(line))
                    if seen[-1]["type"] == "turn.completed" and len(seen) > len(events):
                        return

    reader = threading.Thread(target=follow)
    reader.start()
    assert opened.wait(WAIT)
    httpx.post(f"{server.url}{API}/session/{sid}", json={"message": "again"}, timeout=WAIT)
    reader.join(WAIT)
    assert not reader.is_alive()
    assert seen[: len(events) - 1] == events[1:]
    assert [e["index"] for e in seen] == list(range(1, 1 + len(seen)))
    texts = [e.get("text") for e in seen if e["type"] == "message.completed"]
    assert texts == ["first answer", "second answer"]


def sse_frames(response: httpx.Response, count: int) -> list[dict[str, Any]]:
    """Parse ``count`` SSE events (id + data) from a streaming response."""
    frames: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    for line in response.iter_lines():
        if line.startswith("id: "):
            current["id"] = int(line[4:])
        elif line.startswith("data: "):
            current["data"] = json.loads(line[6:])
        elif line == "" and current:
            frames.append(current)
            current = {}
            if len(frames) == count:
                break
    return frames


def test_sse_ids_and_last_event_id_wins(server: ServerThread) -> None:
    sid, events = settled_session(server)
    url = f"{server.url}{API}/session/{sid}/stream"
    accept = {"accept": "text/event-stream"}
    with httpx.stream("GET", url, headers=accept, timeout=WAIT) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        frames = sse_frames(response, len(events))
    assert [f["id"] for f in frames] == list(range(len(events)))
    assert [f["data"] for f in frames] == events
    # A reconnect resumes after Last-Event-ID, whatever startIndex says.
    resume = {**accept, "last-event-id": "2"}
    with httpx.stream("GET", url, headers=resume, params={"startIndex": 0}, timeout=WAIT) as r:
        frames = sse_frames(r, len(events) - 3)
    assert [f["id"] for f in frames] == list(range(3, len(events)))
    bad = httpx.get(url, headers={**accept, "last-event-id": "x"}, timeout=WAIT)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_request"


def test_sse_heartbeats_on_an_idle_stream(server: ServerThread) -> None:
    sid, events = settled_session(server)
    url = f"{server.url}{API}/session/{sid}/stream"
    params = {"startIndex": len(events)}
    with httpx.stream(
        "GET", url, params=params, headers={"accept": "text/event-stream"}, timeout=WAIT
    ) as response:
        lines = response.iter_lines()
        comments = [line for line in (next(lines) for _ in range(6)) if line.startswith(":")]
    assert comments.count(": heartbeat") >= 2


def _open_fds() -> int:
    return len(_fd_targets())


def _fd_targets() -> list[str]:
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(targets)


def test_disconnect_leaves_no_task_or_file_handle(server: ServerThread) -> None:
    sid, _events = settled_session(server)
    hub = server.channel.hub  # type: ignore[union-attr]
    baseline = _open_fds()
    before = _fd_targets()
    for _ in range(5):
        with httpx.stream("GET", f"{server.url}{API}/session/{sid}/stream", timeout=WAIT) as r:
            for line in r.iter_lines():
                if line.strip():
                    break
    # Disconnects are noticed asynchronously: wait (bounded) for the server to let go.
    server.wait(hub.wait_idle())

    def eve_tasks() -> list[str]:
        return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("eve-")]

    assert server.call(eve_tasks) == []
    assert server.call(lambda: hub.open_streams) == 0
    # The tail's watcher thread lets go of its descriptors within its 1 s poll timeout.
    assert eventually(lambda: _open_fds() <= baseline), (before, _fd_targets())


def test_shutdown_ends_open_streams(serve: Callable[..., ServerThread], tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [reply("x")])
    server = serve(write_agent(tmp_path / "agent", script), heartbeat=0.2)
    sid = httpx.post(f"{server.url}{API}/session", json={}, timeout=WAIT).json()["sessionId"]
    ended, opened = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            with httpx.stream("GET", f"{server.url}{API}/session/{sid}/stream", timeout=WAIT) as r:
                for _ in r.iter_lines():
                    opened.set()
            ended.set()
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=follow)
    reader.start()
    # The stream is open once its first byte arrived.
    assert opened.wait(WAIT)
    server.stop()
    reader.join(WAIT)
    assert ended.is_set(), errors
