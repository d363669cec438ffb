"""Log floods: a stream of bad connections, or a repeating loop error, writes a bounded number of
lines and then says how many it left out."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from eve_cli.channel._conn import FloodGuard, loop_error_logger
from tests.eve_cli.channel.channel_support import WAIT, EveProcess


def test_garbage_connections_do_not_flood_the_log(eve_process: Callable[..., EveProcess]) -> None:
    server = eve_process("start", "--port", "0")
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    for _ in range(200):  # each is "Invalid HTTP request received." in uvicorn's log
        with socket.create_connection((host, int(port)), timeout=WAIT) as sock:
            sock.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
            sock.recv(4096)
    server.signal(15)
    assert server.wait() == 0
    server.close()
    lines = [line for line in server.stderr_lines if "Invalid HTTP request" in line]
    assert 1 <= len(lines) <= 20, len(lines)


def test_a_flood_guard_writes_a_burst_then_counts() -> None:
    lines: list[str] = []
    guard = FloodGuard(lines.append, burst=3, window=0.2)
    for i in range(10):
        guard(f"line {i}")
    assert lines == ["line 0", "line 1", "line 2"]
    time.sleep(0.25)
    guard("after")
    assert lines[3:] == ["(7 similar log lines left out in 0.2 s)", "after"]


def test_loop_errors_are_one_line_for_the_system_and_a_traceback_for_a_bug() -> None:
    lines: list[str] = []
    handle = loop_error_logger(lines.append)
    handle(
        None,  # type: ignore[arg-type]
        {
            "message": "socket.accept() out of system resource",
            "exception": OSError(24, "Too many open files"),
        },
    )
    try:
        dict[str, int]()["missing"]
    except KeyError as exc:
        handle(None, {"message": "Task exception was never retrieved", "exception": exc})  # type: ignore[arg-type]
    assert lines[0] == (
        "socket.accept() out of system resource: OSError: [Errno 24] Too many open files"
    )
    assert "\n" in lines[1] and "Traceback" in lines[1] and "KeyError" in lines[1]


def test_a_flood_filter_passes_a_burst_then_says_what_it_left_out() -> None:
    import logging

    from eve_cli.channel._conn import FloodFilter

    flood = FloodFilter(burst=2, window=0.2)
    records = [
        logging.LogRecord("x", logging.WARNING, "", 0, "bad %d", (i,), None) for i in range(6)
    ]
    assert [flood.filter(r) for r in records] == [True, True, False, False, False, False]
    time.sleep(0.25)
    later = logging.LogRecord("x", logging.WARNING, "", 0, "later %s", ("one",), None)
    assert (
        flood.filter(later)
        and later.getMessage() == "(4 log records left out before this) later one"
    )
