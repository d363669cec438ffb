"""What a web page (or a flood of sockets) can do to a loopback `eve start` with no token: real
`python -m eve_cli start` processes on 127.0.0.1, raw sockets where a browser's request is
imitated byte for byte (a page's `fetch` sends exactly these headers)."""

from __future__ import annotations

import json
import re
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    ServerThread,
    call,
    eventually,
    read_events,
    reply,
    write_agent,
    write_script,
)

API = "/eve/v1"
EVIL = "http://evil.example"
GATED_TOOLS = """
from eve_cli import always, tool

@tool(approval=always())
def wipe(what: str) -> str:
    \"\"\"Needs the user's approval.\"\"\"
    return "wiped " + what
"""


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    script = write_script(tmp_path / "script.json", [call("wipe", what="home"), reply("done")])
    return write_agent(tmp_path / "agent", script, GATED_TOOLS)


def raw(url: str, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` as is on a new connection; (status, body) of the answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def browser_post(url: str, path: str, body: str, content_type: str, **headers: str) -> bytes:
    """A POST as a page's `fetch(..., {mode: "no-cors"})` sends it (Host from the URL unless
    given: a rebound name keeps the page's own)."""
    host = headers.pop("host", url.removeprefix("http://"))
    lines = [f"POST {API}{path} HTTP/1.1", f"host: {host}", f"content-type: {content_type}",
             f"content-length: {len(body.encode())}", "connection: close",
             *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()


def browser_get(url: str, path: str, host: str, origin: str | None = None) -> bytes:
    extra = f"origin: {origin}\r\n" if origin else ""
    return f"GET {API}{path} HTTP/1.1\r\nhost: {host}\r\n{extra}connection: close\r\n\r\n".encode()


def parked_session(server: EveProcess) -> tuple[str, str]:
    """A session parked on an approval of the `wipe` tool: (session id, request id)."""
    created = httpx.post(f"{server.url}{API}/session", json={"message": "wipe it"}, timeout=WAIT)
    sid = created.json()["sessionId"]
    events = read_events(server.url, sid, lambda e: e["type"] == "input.requested")
    return sid, str(events[-1]["requestId"])


def test_a_cross_site_text_plain_post_creates_nothing(
    eve_process: Callable[..., EveProcess], agent: Path
) -> None:
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    body = json.dumps({"message": "wipe my home"})
    status, answer = raw(
        server.url, browser_post(server.url, "/session", body, "text/plain", origin=EVIL)
    )
    assert status == 403, answer
    assert "evil.example" in json.loads(answer)["error"]["message"]
    # Without an Origin (not a browser, or a browser that hid it) text/plain is still no write.
    status, answer = raw(server.url, browser_post(server.url, "/session", body, "text/plain"))
    assert status == 415 and json.loads(answer)["error"]["code"] == "unsupported_media_type"
    form = "message=wipe"
    status, _ = raw(
        server.url,
        browser_post(server.url, "/session", form, "application/x-www-form-urlencoded"),
    )
    assert status == 415
    assert httpx.get(f"{server.url}{API}/sessions", timeout=WAIT).json()["sessions"] == []


def test_a_rebound_name_can_neither_read_nor_approve(
    eve_process: Callable[..., EveProcess], agent: Path
) -> None:
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    sid, request_id = parked_session(server)
    port = server.url.rsplit(":", 1)[1]
    rebound = f"evil.example:{port}"  # the page's name, now resolving to 127.0.0.1
    for path in ("/sessions", f"/session/{sid}", f"/session/{sid}/stream"):
        # Same-origin for the page after rebinding: its Origin is its own name, or none.
        for origin in (None, f"http://{rebound}"):
            status, answer = raw(server.url, browser_get(server.url, path, rebound, origin))
            assert status == 421, (path, answer)
            assert b"wipe" not in answer and sid.encode() not in answer
    approve = json.dumps({"inputResponses": [{"requestId": request_id, "approved": True}]})
    for headers in ({}, {"origin": f"http://{rebound}"}):
        status, _ = raw(
            server.url,
            browser_post(
                server.url, f"/session/{sid}", approve, "application/json", host=rebound, **headers
            ),
        )
        assert status == 421
    view = httpx.get(f"{server.url}{API}/session/{sid}", timeout=WAIT).json()
    assert view["status"] == "parked" and [p["requestId"] for p in view["pending"]] == [request_id]


def test_the_servers_own_pages_and_configured_origins_are_served(
    eve_process: Callable[..., EveProcess], agent: Path
) -> None:
    allowed = "http://localhost:5173"
    server = eve_process("start", "--port", "0", "--agent", str(agent), "--allow-origin", allowed)
    sid, request_id = parked_session(server)
    port = server.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):  # the browser view at /, same origin
        status, answer = raw(
            server.url, browser_get(server.url, "/sessions", host, f"http://{host}")
        )
        assert status == 200 and sid.encode() in answer
    # A configured origin passes a preflight and gets CORS headers; another one does not.
    preflight = {"origin": allowed, "access-control-request-method": "POST",
                 "access-control-request-headers": "content-type"}  # fmt: skip
    ok = httpx.options(f"{server.url}{API}/session/{sid}", headers=preflight, timeout=WAIT)
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == allowed
    foreign = httpx.options(
        f"{server.url}{API}/session/{sid}", headers={**preflight, "origin": EVIL}, timeout=WAIT
    )
    assert foreign.status_code == 403 and "access-control-allow-origin" not in foreign.headers
    approve = {"inputResponses": [{"requestId": request_id, "approved": True}]}
    answered = httpx.post(
        f"{server.url}{API}/session/{sid}", json=approve, headers={"origin": allowed}, timeout=WAIT
    )
    assert answered.status_code == 202, answered.text
    assert answered.headers["access-control-allow-origin"] == allowed
    events = read_events(server.url, sid, lambda e: e["type"] == "action.result")
    assert "wiped home" in str(events[-1])


def test_deeply_nested_json_is_a_400(eve_process: Callable[..., EveProcess]) -> None:
    server = eve_process("start", "--port", "0")
    nested = '{"message": "x", "deep": ' + "[" * 200_000 + "]" * 200_000 + "}"
    assert len(nested) < 1 << 20  # within the size limit: only the nesting is wrong
    for path in ("/session", "/session/s_abc"):
        response = httpx.post(
            f"{server.url}{API}{path}",
            content=nested,
            headers={"content-type": "application/json"},
            timeout=WAIT,
        )
        assert response.status_code == 400, response.text
        assert "nested too deeply" in response.json()["error"]["message"]
    assert httpx.get(f"{server.url}{API}/health", timeout=WAIT).json() == {"ok": True}


@pytest.fixture
def low_fd_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    """`eve start` limited to 64 file descriptors; its stderr goes to a file."""
    err = tmp_path / "stderr.txt"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eve_cli", "start", "--port", "0"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, preexec_fn=limit,
        )  # fmt: skip
    assert proc.stdout is not None
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(WAIT)
    match = re.search(r"serving (http://\S+)", line[0] if line else "")
    try:
        assert match, (line, err.read_text())
        yield match.group(1), proc, err
    finally:
        proc.kill()
        proc.communicate(timeout=WAIT)


def test_idle_sockets_do_not_lock_out_a_real_request(
    low_fd_server: tuple[str, subprocess.Popen[str], Path],
) -> None:
    url, proc, err = low_fd_server
    host, port = url.removeprefix("http://").rsplit(":", 1)
    idle: list[socket.socket] = []
    try:
        for _ in range(120):  # twice the server's descriptor limit, none sending a byte
            idle.append(socket.create_connection((host, int(port)), timeout=WAIT))
        began = time.monotonic()
        for _ in range(5):
            response = httpx.get(f"{url}{API}/health", timeout=5)
            assert response.json() == {"ok": True}
        assert time.monotonic() - began < 5
        created = httpx.post(f"{url}{API}/session", json={}, timeout=5)
        assert created.status_code == 202
    finally:
        for sock in idle:
            sock.close()
    assert proc.poll() is None
    assert err.stat().st_size < 20_000, err.read_text()[:2000]


def test_a_connection_that_never_finishes_its_headers_is_closed(tmp_path: Path) -> None:
    from eve_cli.runtime import Runtime

    server = ServerThread(
        lambda: Runtime(data_dir=tmp_path / "data"), server_options={"header_timeout": 0.5}
    ).start()
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
            began = time.monotonic()
            sock.sendall(b"GET /eve/v1/health HTTP/1.1\r\nhost: x")  # and never the rest
            assert sock.recv(1) == b""  # closed by the server
            assert 0.4 < time.monotonic() - began < 5
        with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
            assert sock.recv(1) == b""  # a connection sending nothing at all: closed too
        # A kept-alive connection between requests is not cut by it.
        with httpx.Client(base_url=server.url, timeout=WAIT) as client:
            assert client.get(f"{API}/health").status_code == 200
            time.sleep(1.0)
            assert client.get(f"{API}/health").status_code == 200
            assert client.get(f"{API}/health").status_code == 200
    finally:
        server.stop()


def test_when_every_connection_is_busy_a_new_one_gets_a_503(tmp_path: Path) -> None:
    from eve_cli.runtime import Runtime

    server = ServerThread(
        lambda: Runtime(data_dir=tmp_path / "data"), server_options={"max_connections": 3}
    ).start()
    try:
        sid = httpx.post(f"{server.url}{API}/session", json={}, timeout=WAIT).json()["sessionId"]
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        streams = []
        for _ in range(3):  # three open event streams: requests in progress, none idle
            sock = socket.create_connection((host, int(port)), timeout=WAIT)
            sock.sendall(
                f"GET {API}/session/{sid}/stream HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
            )
            assert sock.recv(12) == b"HTTP/1.1 200"
            streams.append(sock)
        refused = httpx.get(f"{server.url}{API}/health", timeout=WAIT)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable"
        streams.pop().close()
        assert eventually(
            lambda: httpx.get(f"{server.url}{API}/health", timeout=WAIT).status_code == 200
        )
        for sock in streams:
            sock.close()
    finally:
        server.stop()
    assert any("every open connection is busy" in line for line in server.logs)
