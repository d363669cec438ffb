"""`python -m eve_cli start` as a real process: kill -9 mid-turn and restart, SIGTERM during a
stream, and the refusal to bind a non-loopback address without a token."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.eve_cli.channel.channel_support import (
    WAIT,
    EveProcess,
    call,
    of_type,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)

API = "/eve/v1"

COUNTING_TOOLS = """
from pathlib import Path
from eve_cli import tool

@tool
def note(text: str) -> str:
    \"\"\"Append a line to a file (counts real executions).\"\"\"
    with open(Path(__file__).parent.parent / "runs.txt", "a") as f:
        f.write(text + "\\n")
    return "noted " + text
"""


def test_kill_9_mid_turn_then_restart_completes_the_turn_without_a_request(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    # Step 1 runs a tool; step 2's model call streams a first delta and then stalls.
    script = write_script(
        tmp_path / "s.json",
        [call("note", text="once"), reply("the final answer after the pause", delay=2.0)],
    )
    agent = write_agent(tmp_path / "agent", script, COUNTING_TOOLS)
    first = eve_process("start", "--port", "0", "--agent", str(agent))
    sid = httpx.post(f"{first.url}{API}/session", json={"message": "go"}, timeout=WAIT).json()[
        "sessionId"
    ]
    before = read_events(
        first.url, sid, lambda e: e["type"] == "message.appended" and e.get("stepIndex", 0) >= 1
    )
    assert not any(e["type"] == "turn.completed" for e in before)
    first.signal(signal.SIGKILL)
    first.wait()

    second = eve_process("start", "--port", "0", "--agent", str(agent))
    # No request but reading: the restarted server resumes the turn on its own.
    events = read_events(second.url, sid, settled())
    assert [e["type"] for e in events].count("turn.completed") == 1
    texts = [e.get("text") for e in events if e["type"] == "message.completed"]
    assert texts[-1] == "the final answer after the pause"
    assert (agent / "runs.txt").read_text().splitlines() == ["once"]  # the tool ran once
    assert any(f"resuming 1 in-flight session(s): {sid}" in line for line in second.stderr_lines)
    assert httpx.get(f"{second.url}{API}/session/{sid}", timeout=WAIT).json()["status"] == (
        "waiting"
    )


def test_sigterm_during_a_stream_ends_it_and_exits_cleanly(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.json", [reply("hi")])
    server = eve_process(
        "start", "--port", "0", "--agent", str(write_agent(tmp_path / "a", script))
    )
    sid = httpx.post(f"{server.url}{API}/session", json={"message": "x"}, timeout=WAIT).json()[
        "sessionId"
    ]
    read_events(server.url, sid, of_type("turn.completed"))
    lines: list[str] = []
    opened, ended = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            url = f"{server.url}{API}/session/{sid}/stream"
            with httpx.stream("GET", url, timeout=WAIT) as response:
                for line in response.iter_lines():
                    lines.append(line)
                    opened.set()
            ended.set()
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=follow)
    reader.start()
    assert opened.wait(WAIT)
    server.signal(signal.SIGTERM)
    reader.join(WAIT)
    assert ended.is_set(), errors  # the stream ended cleanly, not with a broken connection
    assert server.wait() == 0
    events = [json.loads(line) for line in lines if line.strip()]
    assert [e["index"] for e in events] == list(range(len(events)))
    assert not any("Traceback" in line for line in server.stderr_lines)


def run_eve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", *args], capture_output=True, text=True, timeout=WAIT
    )


def test_non_loopback_bind_without_token_refuses(tmp_path: Path) -> None:
    done = run_eve("start", "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 1
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "0.0.0.0" in err[0] and "EVE_AUTH_TOKEN" in err[0], done.stderr
    assert "Traceback" not in done.stderr and "serving" not in done.stdout


def test_non_loopback_bind_with_token_serves_and_demands_it(
    eve_process: Callable[..., EveProcess],
) -> None:
    server = eve_process("start", "--host", "0.0.0.0", "--port", "0", "--token", "tok-123")
    url = server.url.replace("0.0.0.0", "127.0.0.1")
    assert httpx.get(f"{url}{API}/sessions", timeout=WAIT).status_code == 401
    good: dict[str, Any] = {"authorization": "Bearer tok-123"}
    assert httpx.get(f"{url}{API}/sessions", headers=good, timeout=WAIT).status_code == 200


def test_sigterm_mid_turn_exits_within_the_grace_and_the_turn_resumes(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.json", [reply("slow answer arrives", delay=30.0)])
    agent = write_agent(tmp_path / "agent", script)
    first = eve_process("start", "--port", "0", "--agent", str(agent), "--grace", "0.5")
    sid = httpx.post(f"{first.url}{API}/session", json={"message": "go"}, timeout=WAIT).json()[
        "sessionId"
    ]
    read_events(first.url, sid, of_type("message.appended"))
    first.signal(signal.SIGTERM)
    # The drive gets its 0.5 s grace, then is cancelled: far sooner than the 30 s model call.
    assert first.wait(timeout=10) == 0
    assert any("resume on next start" in line for line in first.stderr_lines)
    # The re-run model call answers at once (same entry, no delay).
    (tmp_path / "s.json").write_text(json.dumps([reply("slow answer arrives")]))
    second = eve_process("start", "--port", "0", "--agent", str(agent))
    settled_events = read_events(second.url, sid, settled())
    texts = [e.get("text") for e in settled_events if e["type"] == "message.completed"]
    assert texts == ["slow answer arrives"]


def test_busy_port_is_one_error_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = run_eve("start", "--port", str(port))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "--port" in lines[0]


def test_broken_agent_folder_is_one_error_line_with_file_and_line(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "agent.py").write_text("from eve_cli import define_agent\n\nagent = define_agent(\n")
    done = run_eve("start", "--port", "0", "--agent", str(agent))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "agent.py:3" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_sigint_exits_130(eve_process: Callable[..., EveProcess]) -> None:
    server = eve_process("start", "--port", "0")
    server.signal(signal.SIGINT)
    assert server.wait() == 130
    assert not any("Traceback" in line for line in server.stderr_lines)


HTTPX_KEEPALIVE = 5.0  # httpx's default keepalive_expiry: how long it reuses an idle connection


def _response(sock: socket.socket) -> bytes:
    """One whole HTTP/1.1 response read from ``sock`` (b"" when the server closed it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_an_idle_connection_outlives_the_clients_keep_alive(
    eve_process: Callable[..., EveProcess],
) -> None:
    # A client reuses an idle connection for up to its own keep-alive expiry. A server that
    # closes it at that same moment races the client's next request, which then fails with a
    # reset connection (httpx.ReadError: the benchmark's 100 sessions hit it). The server keeps
    # idle connections longer than common clients do, so the client always closes first.
    server = eve_process("start", "--port", "0")
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    request = f"GET {API}/health HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
    with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
        sock.sendall(request)
        assert _response(sock).startswith(b"HTTP/1.1 200")
        threading.Event().wait(HTTPX_KEEPALIVE + 0.5)
        sock.sendall(request)
        again = _response(sock)
    assert again.startswith(b"HTTP/1.1 200"), again
    assert again.endswith(b'{"ok":true}')


def test_the_served_socket_sends_small_writes_at_once() -> None:
    import asyncio
    import socket

    from eve_cli.channel import bind_socket

    # asyncio turns Nagle off (TCP_NODELAY) only for sockets whose proto says TCP; with it on,
    # a response written as headers then body waited for the client's delayed ACK (~40 ms).
    async def main() -> int:
        listener = bind_socket("127.0.0.1", 0)
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        try:
            host, port = listener.getsockname()[:2]
            _, writer = await asyncio.open_connection(host, port)
            value = await asyncio.wait_for(accepted, 5)
            writer.close()
            return value
        finally:
            server.close()

    assert asyncio.run(main()) == 1
