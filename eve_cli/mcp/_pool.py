"""The MCP servers one process talks to: started when first needed, reused across turns and
sessions, started again when they died, stopped when the runtime closes (and, for stdio
servers, with the process even when it is killed: see :mod:`._stdio`).

A server that cannot start, dies, times out or speaks badly is :class:`ServerUnavailable`:
one line naming the server, what happened and the end of its stderr. Nothing here is
durable; the caller (a tool action of the harness) journals what a call returned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from eve_cli._agent_api import ToolContext
from eve_cli._env import load_env
from eve_cli._json import JSONObject
from eve_cli._tools import ToolResult
from eve_cli.mcp._config import MissingVariableError, ServerSpec, expand
from eve_cli.mcp._connection import Connection, ListedTool, ServerUnavailable

__all__ = ["ListedTool", "McpPool", "ServerUnavailable"]

log = logging.getLogger("eve_cli.mcp")


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
            for problem in await asyncio.wait_for(conn.list_tools(), spec.start_timeout):
                self.report(problem)
        except ServerUnavailable as exc:
            return self.report(str(exc))
        except TimeoutError:
            assert conn is not None
            self._retire(conn)
            seconds = spec.start_timeout
            return self.report(conn.describe(f"did not list its tools within {seconds:g} s"))
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
        self, spec: ServerSpec, exposed: str, arguments: JSONObject, ctx: ToolContext
    ) -> ToolResult:
        """Call the tool the model calls ``exposed``; every failure is a tool-error result
        (never raises but for a cancel)."""
        conn: Connection | None = None
        tool: ListedTool | None = None
        try:
            conn = await self.connect(spec)
            tool = await self._tool(conn, exposed)
            if tool is None or not spec.allows(tool.name):
                return ToolResult(f"MCP server {spec.name!r} has no usable tool {exposed!r}", True)
            return await self._call(conn, tool, arguments, ctx)
        except ServerUnavailable as exc:
            return ToolResult(str(exc), True)
        except TimeoutError:
            seconds = spec.timeout_for(tool.name) if tool is not None else spec.start_timeout
            what = f"did not answer a call of {exposed!r} within {seconds:g} s"
            if conn is None:
                return ToolResult(what, True)
            self._retire(conn)  # it may hang for good: the next call gets a fresh server
            return ToolResult(conn.describe(what), True)
        except MCPError as exc:
            assert conn is not None
            if not closed(conn, exc):  # the server's own error, from a live connection
                return ToolResult(conn.describe(f"refused {exposed!r}", exc), True)
            return await self._broken(conn, f"failed during a call of {exposed!r}", exc)
        except Exception as exc:
            if conn is None:
                raise
            return await self._broken(conn, f"failed during a call of {exposed!r}", exc)

    async def _tool(self, conn: Connection, exposed: str) -> ListedTool | None:
        tool = conn.tools.get(exposed)
        if tool is None:  # not listed by this process yet, or added since
            for problem in await asyncio.wait_for(conn.list_tools(), conn.spec.start_timeout):
                self.report(problem)
            tool = conn.tools.get(exposed)
        return tool

    @staticmethod
    async def _call(
        conn: Connection, tool: ListedTool, arguments: JSONObject, ctx: ToolContext
    ) -> ToolResult:
        """One call on ``conn``, counted: a retired connection stops after its last call."""
        conn.calls += 1
        try:
            return await conn.call(tool, arguments, ctx)
        finally:
            conn.calls -= 1
            if conn.retired and conn.calls == 0:
                conn.kill()

    def _retire(self, conn: Connection) -> None:
        """Take ``conn`` out of use (a call on it timed out): new calls start the server
        again; calls under way on it (other sessions') finish, then it stops."""
        key = conn.spec.launch_key()
        if self._connections.get(key) is conn:
            del self._connections[key]
        conn.retired = True
        if conn.calls == 0:
            conn.kill()

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


def closed(conn: Connection, exc: MCPError) -> bool:
    """Whether ``exc`` says the connection ended: the SDK's own outcome for it. A live server
    may answer with the same code (-32000 opens JSON-RPC's server-error range): that is its
    error, unless the connection is in fact gone."""
    said_closed = (
        exc.code == CONNECTION_CLOSED and exc.message == "Connection closed" and exc.data is None
    )
    return said_closed or not conn.alive()
