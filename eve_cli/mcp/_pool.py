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
from eve_cli._tools import ToolResult
from eve_cli.mcp._config import START_TIMEOUT, MissingVariableError, ServerSpec, expand
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
        tool: ListedTool | None = None
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
            seconds = spec.timeout_for(tool.name) if tool is not None else spec.timeout
            what = f"did not answer a call of {exposed!r} within {seconds:g} s"
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
