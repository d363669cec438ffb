"""The MCP servers one process talks to: started when first needed, reused across turns and
sessions, started again when they died, stopped when the runtime closes (and, for stdio
servers, with the process even when it is killed: see :mod:`._stdio`).

A server that cannot start, dies, times out or speaks badly is :class:`ServerUnavailable`:
one line naming the server, what happened and the end of its stderr. Nothing here is
durable; the caller (a tool action of the harness) journals what a call returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import mcp_types
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from eve_cli._agent_api import ToolContext
from eve_cli._env import load_env
from eve_cli._tools import ToolResult
from eve_cli._version import __version__
from eve_cli.mcp._config import START_TIMEOUT, Launch, MissingVariableError, ServerSpec, expand
from eve_cli.mcp._names import exposed_name
from eve_cli.mcp._results import to_result
from eve_cli.mcp._schemas import argument_problem, schema_problem
from eve_cli.mcp._stdio import StdioTransport, kill_group

log = logging.getLogger("eve_cli.mcp")

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
    schema: dict[str, Any]


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
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def alive(self) -> bool:
        if self.client is None or self.broken is not None or self._task is None:
            return False
        if self._task.done() or self.loop is not asyncio.get_running_loop():
            return False
        transport = self.transport
        return transport is None or not (
            transport.ended or transport.failure or transport.exit_status()
        )

    async def open(self) -> None:
        ready: asyncio.Future[None] = self.loop.create_future()
        self._task = self.loop.create_task(self._run(ready), name=f"eve-mcp-{self.spec.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT)
        except TimeoutError:
            await self.close()
            what = self.describe(f"did not start within {START_TIMEOUT:g} s")
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

    async def call(
        self, tool: ListedTool, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
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
            self.spec.timeout,
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


class McpPool:
    """The servers of every agent this process runs, by launch settings."""

    def __init__(self) -> None:
        self._connections: dict[tuple[Any, ...], Connection] = {}
        self._starting: dict[tuple[Any, ...], asyncio.Future[Connection]] = {}
        self._reported: set[str] = set()

    async def connect(self, spec: ServerSpec) -> Connection:
        """The running server of ``spec``: this process's, else started now.

        Raises:
            ServerUnavailable: it cannot be started.
        """
        key = spec.launch_key()
        conn = self._connections.get(key)
        if conn is not None and conn.alive():
            return conn
        starting = self._starting.get(key)
        if starting is not None and starting.get_loop() is asyncio.get_running_loop():
            return await asyncio.shield(starting)
        future: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._starting[key] = future
        try:
            if conn is not None:
                await self._drop(key, conn)
            self._drop_edited(spec)
            try:
                launch = expand(spec, load_env())
            except MissingVariableError as exc:
                raise ServerUnavailable(str(exc)) from None
            conn = Connection(launch)
            await conn.open()
            self._connections[key] = conn
            future.set_result(conn)
            return conn
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a start nobody else awaited is no warning
            raise
        finally:
            self._starting.pop(key, None)

    def _drop_edited(self, spec: ServerSpec) -> None:
        """Stop the servers an edit of ``spec``'s declaration replaced."""
        for key, conn in list(self._connections.items()):
            if conn.spec.name == spec.name and conn.spec.base_dir == spec.base_dir:
                del self._connections[key]
                conn.kill()

    async def _drop(self, key: tuple[Any, ...], conn: Connection) -> None:
        if self._connections.get(key) is conn:
            del self._connections[key]
        if conn.loop is asyncio.get_running_loop():
            await conn.close()
        else:
            conn.kill()

    async def hydrate(self, specs: Sequence[ServerSpec]) -> tuple[list[ListedTool], list[str]]:
        """Every allowed tool of ``specs``' servers, read now, and a line for each server that
        is unavailable (logged once per process and reason)."""
        found = await asyncio.gather(*(self._listing(spec) for spec in specs))
        tools: list[ListedTool] = []
        notes: list[str] = []
        for listed in found:
            if isinstance(listed, str):
                notes.append(listed)
            else:
                tools.extend(listed)
        return tools, notes

    async def _listing(self, spec: ServerSpec) -> list[ListedTool] | str:
        conn: Connection | None = None
        try:
            conn = await self.connect(spec)
            for problem in await asyncio.wait_for(conn.list_tools(), START_TIMEOUT):
                self.report(problem)
        except ServerUnavailable as exc:
            return self.report(str(exc))
        except TimeoutError:
            assert conn is not None
            return self.report(conn.describe(f"did not list its tools within {START_TIMEOUT:g} s"))
        except Exception as exc:
            if conn is None:
                raise
            await conn.settle()
            await self._drop(spec.launch_key(), conn)
            return self.report(conn.describe("failed to list its tools", exc))
        return [t for t in conn.tools.values() if spec.allows(t.name)]

    def report(self, line: str) -> str:
        if line not in self._reported:
            self._reported.add(line)
            log.warning("%s", line)
        return line

    async def call(
        self, spec: ServerSpec, exposed: str, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        """Call the tool the model calls ``exposed``; every failure is a tool-error result
        (never raises but for a cancel)."""
        conn: Connection | None = None
        try:
            conn = await self.connect(spec)
            tool = conn.tools.get(exposed)
            if tool is None:  # not listed by this process yet, or added since
                for problem in await asyncio.wait_for(conn.list_tools(), START_TIMEOUT):
                    self.report(problem)
                tool = conn.tools.get(exposed)
            if tool is None or not spec.allows(tool.name):
                return ToolResult(f"MCP server {spec.name!r} has no usable tool {exposed!r}", True)
            return await conn.call(tool, arguments, ctx)
        except ServerUnavailable as exc:
            return ToolResult(str(exc), True)
        except TimeoutError:
            what = f"did not answer a call of {exposed!r} within {spec.timeout:g} s"
            return ToolResult(conn.describe(what) if conn else what, True)
        except MCPError as exc:
            assert conn is not None
            if exc.code != CONNECTION_CLOSED:
                return ToolResult(conn.describe(f"refused {exposed!r}", exc), True)
            return await self._broken(conn, f"failed during a call of {exposed!r}", exc)
        except Exception as exc:
            if conn is None:
                raise
            return await self._broken(conn, f"failed during a call of {exposed!r}", exc)

    async def _broken(self, conn: Connection, what: str, exc: Exception) -> ToolResult:
        """The connection broke under a call (the server died or spoke badly): the next call
        starts the server again."""
        await conn.settle()
        await self._drop(conn.spec.launch_key(), conn)
        return ToolResult(conn.describe(what, exc), True)

    async def aclose(self) -> None:
        conns, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    def close(self) -> None:
        """Stop every server at once (from anywhere: no loop needed)."""
        conns, self._connections = list(self._connections.values()), {}
        for conn in conns:
            conn.kill()


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _one_line(text: str) -> str:
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())
