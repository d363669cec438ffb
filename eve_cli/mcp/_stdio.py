"""The stdio transport to an MCP server process, eve's own rather than the SDK's: the server
dies with eve even after ``kill -9`` (the parent-death signal), its stderr is kept (its last
:data:`TAIL_BYTES`, in memory) for error lines, and a message over :data:`MAX_MESSAGE` bytes
ends the connection instead of growing a buffer without bound.

The process is started through a small launcher (:data:`LEASH`: set ``PR_SET_PDEATHSIG``, then
``exec`` the command) in a session of its own, so a Ctrl-C at eve's terminal does not reach it
and stopping it stops its process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from eve_cli._text import repair, warn
from eve_cli.mcp._config import Launch

TAIL_BYTES = 4096
MAX_MESSAGE = 16 << 20
STOP_GRACE = 0.5  # seconds a server has to exit once its stdin is closed (then SIGTERM, SIGKILL)
# Variables a server inherits besides those it declares (the SDK's choice, too: API keys in
# eve's environment are not handed to every server).
INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")

LEASH = r"""
import ctypes, os, sys
parent = int(sys.argv[1])
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except (AttributeError, OSError):
    pass  # not Linux: the server still ends when its stdin closes
if os.getppid() != parent:
    os._exit(1)  # eve died before the signal was set
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"cannot run {sys.argv[2]!r}: {exc.strerror}\n")
    os._exit(127)
"""


class StdioTransport:
    """One server process, as an MCP transport (an async context manager of its streams)."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.process: asyncio.subprocess.Process | None = None
        self.failure: str | None = None  # why the connection ended, when eve ended it
        self.ended = False  # the server's stdout ended: the connection is over
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._cm: contextlib.AbstractAsyncContextManager[TransportStreams] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stderr_tail(self) -> str:
        """The end of what the server wrote to stderr (secrets hidden)."""
        text = b"".join(self._tail).decode("utf-8", "replace")
        return self.launch.redact(text.strip())

    def exit_status(self) -> str | None:
        code = self.process.returncode if self.process is not None else None
        if code is None:
            return None
        return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"

    async def __aenter__(self) -> TransportStreams:
        self._cm = self._open()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self._cm is not None
        return await self._cm.__aexit__(*exc)

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[TransportStreams]:
        launch = self.launch
        assert launch.command is not None
        env = {k: v for k, v in os.environ.items() if k in INHERITED} | launch.env
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", "-c", LEASH, str(os.getpid()),
            launch.command, *launch.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=launch.cwd,
            start_new_session=True,
            limit=MAX_MESSAGE,
        )  # fmt: skip
        to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._read_stdout, to_session)
                tasks.start_soon(self._write_stdin, from_session, to_session)
                tasks.start_soon(self._read_stderr)
                try:
                    yield read_stream, write_stream
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop()
                    tasks.cancel_scope.cancel()
        finally:
            for stream in (read_stream, write_stream, to_session, from_session):
                stream.close()

    async def _read_stdout(self, to_session: Any) -> None:
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        async with to_session:
            try:
                await self._pass_stdout(stdout, to_session)
            finally:
                self.ended = True

    async def _pass_stdout(self, stdout: asyncio.StreamReader, to_session: Any) -> None:
        while True:
            try:
                line = await stdout.readline()
            except ValueError:  # over the stream's limit
                self.failure = f"sent a message over {MAX_MESSAGE >> 20} MiB"
                self._kill()
                return
            except (ConnectionError, OSError):
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                message = mcp_types.jsonrpc_message_adapter.validate_python(self._parse(line))
            except (ValueError, RecursionError) as exc:
                item: SessionMessage | Exception = ValueError(str(exc))  # the session reports it
            else:
                item = SessionMessage(message)
            try:
                await to_session.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return

    def _parse(self, line: bytes) -> Any:
        """A line's JSON, its text repaired where it is not valid Unicode (a JSON
        ``"\\ud800"``, which the SDK's parser refuses: the call waited for its timeout)."""
        value, changed = repair(json.loads(line))
        if changed:
            warn(f"MCP server {self.launch.spec.name!r}")
        return value

    async def _write_stdin(self, from_session: Any, to_session: Any) -> None:
        assert self.process is not None and self.process.stdin is not None
        stdin = self.process.stdin
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
                    await stdin.drain()
        except (ConnectionError, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            await to_session.aclose()  # the session sees the connection end, not a hang

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await self.process.stderr.read(4096):
                self._tail.append(chunk)
                self._tail_size += len(chunk)
                while self._tail_size - len(self._tail[0]) >= TAIL_BYTES:
                    self._tail_size -= len(self._tail.popleft())

    async def _stop(self) -> None:
        """Close stdin, then SIGTERM and SIGKILL the process group after a grace each."""
        process = self.process
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self._kill(sig)
            deadline = anyio.current_time() + STOP_GRACE
            while process.returncode is None and anyio.current_time() < deadline:
                await anyio.sleep(0.01)
            if process.returncode is not None:
                break
        with contextlib.suppress(Exception):
            process._transport.close()  # type: ignore[attr-defined]

    def _kill(self, sig: int = signal.SIGKILL) -> None:
        kill_group(self.pid, sig)


def kill_group(pid: int | None, sig: int = signal.SIGKILL) -> None:
    """Signal the process group a server leads (it runs in a session of its own)."""
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
