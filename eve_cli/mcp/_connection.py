"""One MCP server connection: the SDK's client over eve's stdio transport or Streamable HTTP,
held by a task of its own (the client's task group must be entered and left in one task), and
the one-line description of what went wrong with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast

import mcp_types
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from eve_cli._agent_api import ToolContext
from eve_cli._json import JSONObject
from eve_cli._tools import ToolResult
from eve_cli._version import __version__
from eve_cli.mcp._config import Launch
from eve_cli.mcp._names import exposed_name
from eve_cli.mcp._results import to_result
from eve_cli.mcp._schemas import argument_problem, schema_problem
from eve_cli.mcp._stdio import StdioTransport, kill_group

IDEMPOTENCY_META = "eve/idempotencyKey"  # the key of a call in its request's _meta
MAX_PAGES = 20  # tools/list pages read from one server
TAIL_CHARS = 300  # of a server's stderr in an error line


class ServerUnavailable(Exception):
    """A server cannot be used now; ``str()`` is one line for the user and the model."""


@dataclass(frozen=True)
class ListedTool:
    """One tool a server lists: its MCP name, the model's name for it, what the model reads."""

    server: str
    name: str
    exposed: str
    description: str
    schema: JSONObject


class Connection:
    """One running server and the client session to it, held by a task of its own."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.spec = launch.spec
        self.loop = asyncio.get_running_loop()
        self.transport = StdioTransport(launch) if self.spec.kind == "stdio" else None
        self.client: Client | None = None
        self.tools: dict[str, ListedTool] = {}
        self.broken: str | None = None
        self.calls = 0  # calls under way (counted by the pool)
        self.retired = False  # a call timed out: no new call is made on it
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def alive(self) -> bool:
        if self.client is None or self.broken is not None or self._task is None or self.retired:
            return False
        if self._task.done() or self.loop is not asyncio.get_running_loop():
            return False
        transport = self.transport
        return transport is None or not (
            transport.ended or transport.failure or transport.exit_status()
        )

    async def open(self) -> None:
        ready: asyncio.Future[None] = self.loop.create_future()
        name = f"eve-mcp-{self.spec.name}"
        task = self._task = self.loop.create_task(self._run(ready), name=name)
        seconds = self.spec.start_timeout
        try:
            await asyncio.wait_for(asyncio.shield(ready), seconds)
        except TimeoutError:
            # Never initialized: nothing to close politely. The start is given up (no one
            # will read ``ready``), the client's task is cancelled, the server killed.
            what = self.describe(
                f"did not start within {seconds:g} s (it never answered initialize; a slow "
                'server can be given more with "startTimeout" in mcp.json)'
            )
            ready.cancel()
            task.cancel()
            self.kill()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, 5)
            raise ServerUnavailable(what) from None

    async def _run(self, ready: asyncio.Future[None]) -> None:
        try:
            info = mcp_types.Implementation(name="eve", version=__version__)
            async with Client(self._transport(), mode="auto", cache=None, client_info=info) as c:
                self.client = c
                ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            what = self.describe(f"{'stopped' if ready.done() else 'failed to start'}", exc)
            self.broken = what
            if not ready.done():
                ready.set_exception(ServerUnavailable(what))
        finally:
            self.client = None
            if not ready.done():
                ready.cancel()

    def _transport(self) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
        return self.transport if self.transport is not None else _http(self.launch)

    def describe(self, what: str, exc: BaseException | None = None) -> str:
        """One line: the server, what happened, why, the end of its stderr (secrets hidden)."""
        parts = [f"MCP server {self.spec.name!r} {what}"]
        transport = self.transport
        status = transport.exit_status() if transport is not None else None
        reason = (transport.failure if transport is not None else None) or status
        if reason:
            parts.append(reason)
        elif exc is not None:
            parts.append(_reason(exc))
        tail = transport.stderr_tail() if transport is not None else ""
        if tail:
            parts.append("stderr: " + _one_line(tail)[-TAIL_CHARS:])
        return self.launch.redact(": ".join(parts[:2]) + "".join(f"; {p}" for p in parts[2:]))

    async def list_tools(self) -> list[str]:
        """Read the server's tools now (every page) into :attr:`tools`; a tool whose schema
        is unusable is left out, and a line says why (returned)."""
        client = self._client()
        listed: dict[str, ListedTool] = {}
        problems: list[str] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            for tool in page.tools:
                problem = schema_problem(tool.input_schema)
                if problem is not None:
                    problems.append(
                        f"MCP server {self.spec.name!r}: tool {tool.name!r} left out: {problem}"
                    )
                    continue
                exposed = exposed_name(self.spec.name, tool.name)
                listed[exposed] = ListedTool(
                    self.spec.name, tool.name, exposed, tool.description or "", tool.input_schema
                )
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = listed
        return problems

    async def call(self, tool: ListedTool, arguments: JSONObject, ctx: ToolContext) -> ToolResult:
        if problem := argument_problem(tool.schema, arguments):
            return ToolResult(f"Invalid arguments for tool {tool.exposed!r}: {problem}", True)

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if message:
                ctx.report_progress(message)

        result = await asyncio.wait_for(
            self._client().call_tool(
                tool.name,
                arguments,
                progress_callback=progress,
                meta=cast(mcp_types.RequestParamsMeta, {IDEMPOTENCY_META: ctx.idempotency_key}),
            ),
            self.spec.timeout_for(tool.name),
        )
        return to_result(result, self.spec.name, tool.name)

    async def settle(self) -> None:
        """Wait a moment for a dead server's exit status and last stderr (for its error)."""
        transport = self.transport
        for _ in range(50):
            if transport is None or transport.exit_status() is not None:
                return
            await asyncio.sleep(0.01)

    def _client(self) -> Client:
        if self.client is None:
            raise ServerUnavailable(self.broken or self.describe("is not running"))
        return self.client

    async def close(self) -> None:
        self._stop.set()
        task = self._task
        if task is not None and not task.done() and self.loop is asyncio.get_running_loop():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), 5)
        self.kill()

    def kill(self) -> None:
        """Stop the server at once (from any thread; a stdio server's process group)."""
        self._stop_soon()
        if self.transport is not None:
            kill_group(self.transport.pid)

    def _stop_soon(self) -> None:
        with contextlib.suppress(RuntimeError):  # its loop is closed: nothing waits there
            self.loop.call_soon_threadsafe(self._stop.set)


@contextlib.asynccontextmanager
async def _http(launch: Launch) -> AsyncIterator[TransportStreams]:
    assert launch.url is not None
    async with (
        create_mcp_http_client(headers=launch.headers) as http,
        streamable_http_client(launch.url, http_client=http) as streams,
    ):
        yield streams


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):  # may be several lines (a parser's report): the first two
        return _one_line("\n".join(exc.error.message.splitlines()[:2]))
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _OneLine(logging.Filter):
    """The SDK logs an answer it cannot parse with a traceback: one line instead (the call
    gets the error, said once in its result)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            why = str(record.exc_info[1]).splitlines()
            record.msg = f"{record.getMessage()}: {why[0] if why else type(record.exc_info[1])}"
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


logging.getLogger("mcp.client.streamable_http").addFilter(_OneLine())


def _one_line(text: str) -> str:
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())
