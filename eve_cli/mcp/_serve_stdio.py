"""The stdio transport of ``eve mcp``: the SDK's ``stdio_server`` over streams of eve's own,
so that every line a client sends gets an answer.

The SDK drops a line it cannot parse without a word (the client waits forever): here a line
that is not JSON, JSON nested too deeply to parse, a message that is not JSON-RPC, or text
that is not valid Unicode (a ``"\\ud800"`` escape) is answered at once with a JSON-RPC error
(its id when one can be read, else null) and never reaches the server.

While serving, fd 0 reads the null device and fd 1 goes to stderr (as the SDK's own transport
does), so a tool that prints cannot corrupt the wire; both are restored at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import IO, Any

import anyio
import mcp_types
from mcp.server.stdio import stdio_server

from eve_cli._text import bad_text

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
MAX_LINE = 16 << 20  # bytes of one request at most


class _Wire:
    """The client's end: whole lines in, whole lines out (one writer at a time)."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes]) -> None:
        self.reader, self.writer = reader, writer
        self.lock = anyio.Lock()

    async def write(self, text: str) -> None:
        """A whole line (the SDK's writer and the error answers share the wire)."""
        async with self.lock:
            await anyio.to_thread.run_sync(self._write, text.encode("utf-8", "replace"))

    def _write(self, data: bytes) -> None:
        self.writer.write(data)
        self.writer.flush()

    async def flush(self) -> None:
        """Every :meth:`write` is flushed already."""

    async def answer_error(self, rid: Any, code: int, message: str) -> None:
        error = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
        await self.write(json.dumps(error) + "\n")

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        """The lines the server can read; every other one is answered here."""
        while raw := await anyio.to_thread.run_sync(self.reader.readline, MAX_LINE + 1):
            if len(raw) > MAX_LINE:  # the rest of that line is dropped, then answered
                while (rest := self.reader.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                    pass
                await self.answer_error(None, INVALID_REQUEST, f"a message over {MAX_LINE} bytes")
                continue
            line = raw.decode("utf-8", "replace")  # as the SDK reads: bytes that are not U+FFFD
            if not line.strip():
                continue
            problem = _problem(line)
            if problem is None:
                yield line
            else:
                await self.answer_error(*problem)


def _problem(line: str) -> tuple[Any, int, str] | None:
    """The error answer to ``line`` (id, code, message), or None when the server can read it."""
    try:
        message = json.loads(line)
    except RecursionError:
        return None, PARSE_ERROR, "Parse error: JSON nested too deeply"
    except ValueError as exc:
        return None, PARSE_ERROR, f"Parse error: not JSON ({exc})"
    rid = message.get("id") if isinstance(message, dict) else None
    rid = rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None
    if (text := bad_text(message)) is not None:
        return (rid if bad_text(rid) is None else None), INVALID_PARAMS, f"Invalid params: {text}"
    try:
        mcp_types.jsonrpc_message_adapter.validate_python(message)
    except (ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return rid, INVALID_REQUEST, f"Invalid Request: not a JSON-RPC message ({first})"
    return None


@contextlib.asynccontextmanager
async def open_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's (read, write) streams over this process's stdin and stdout."""
    wire_in, wire_out = _divert(0, os.devnull, os.O_RDONLY), _divert(1, None, 0)
    wire = _Wire(os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False))
    try:
        async with stdio_server(stdin=wire, stdout=wire) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        for fd, private in ((0, wire_in), (1, wire_out)):
            with contextlib.suppress(OSError):
                os.dup2(private, fd)


def _divert(fd: int, path: str | None, flags: int) -> int:
    """A private copy of ``fd`` (the wire); ``fd`` itself then reads ``path`` or writes to
    stderr (``path`` None)."""
    private = os.dup(fd)
    os.set_inheritable(private, False)
    target = os.open(path, flags) if path is not None else os.dup(2)
    try:
        os.dup2(target, fd)
    finally:
        os.close(target)
    return private
