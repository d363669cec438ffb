"""A real OpenAI-compatible model server on 127.0.0.1 that streams its reply slowly and
records when the client closes the connection (for the Ctrl-C tests)."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class SlowModelServer:
    """Streams ``word`` chunks every ``interval`` seconds for up to ``seconds``; ``closed_at``
    is the monotonic time the client hung up (None while it listens)."""

    def __init__(self, interval: float = 0.1, seconds: float = 60.0) -> None:
        self.interval, self.seconds = interval, seconds
        self.requests = 0
        self.chunks = 0
        self.closed_at: float | None = None
        self.finished = False  # the whole reply was sent
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _chunk(content: str) -> bytes:
    choice = {"index": 0, "delta": {"content": content}}
    data = {"object": "chat.completion.chunk", "choices": [choice]}
    return f"data: {json.dumps(data)}\n\n".encode()


def _hung_up(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _handler(server: SlowModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            server.requests += 1
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            deadline = time.monotonic() + server.seconds
            try:
                while time.monotonic() < deadline:
                    body = _chunk(f"word{server.chunks} ")
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
                    self.wfile.flush()
                    server.chunks += 1
                    until = time.monotonic() + server.interval
                    while time.monotonic() < until:
                        if _hung_up(self.connection):
                            raise ConnectionResetError
                        time.sleep(0.01)
                done = b"data: [DONE]\n\n"
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
                self.wfile.flush()
                server.finished = True
            except OSError:
                server.closed_at = time.monotonic()
                self.close_connection = True

    return Handler
