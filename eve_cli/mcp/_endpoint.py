"""``/mcp`` on ``eve start`` / ``eve dev``: the agent's MCP server over Streamable HTTP, behind
the channel's own guard and bearer token (the SDK's Host checks are off: eve's come first).

The SDK (a second to import) and its session manager start with the first request, in a task
of their own (the manager's task group must outlive any one request), and stop with the
channel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from eve_cli.mcp import sdk_missing

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


class McpEndpoint:
    """The ASGI app at ``/mcp``: the server and its session manager start with the first
    request (importing the SDK costs a second: a server nobody asks pays nothing), in a task
    of their own, and stop with :meth:`aclose`."""

    def __init__(self, make_server: Callable[[], Server[Any]]) -> None:
        self._make_server = make_server
        self._app: Callable[[Scope, Receive, Send], Any] | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None and (missing := sdk_missing()) is not None:
            from starlette.responses import JSONResponse

            error = {"error": {"code": "not_implemented", "message": missing}}
            await JSONResponse(error, 501)(scope, receive, send)
            return
        if self._app is None:
            await self._start()
        assert self._app is not None
        await self._app(scope, receive, send)

    async def _start(self) -> None:
        async with self._lock:
            if self._app is not None:
                return
            from mcp.server.streamable_http_manager import (
                StreamableHTTPASGIApp,
                StreamableHTTPSessionManager,
            )
            from mcp.server.transport_security import TransportSecuritySettings

            # eve's own guard checks Host and Origin before this app is reached.
            manager = StreamableHTTPSessionManager(
                app=self._make_server(),
                security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            )
            ready = asyncio.get_running_loop().create_future()
            self._task = asyncio.get_running_loop().create_task(self._hold(manager, ready))
            await ready
            self._app = StreamableHTTPASGIApp(manager)

    async def _hold(
        self, manager: StreamableHTTPSessionManager, ready: asyncio.Future[None]
    ) -> None:
        try:
            async with manager.run():
                ready.set_result(None)
                await self._stop.wait()
        finally:
            if not ready.done():
                ready.set_exception(RuntimeError("the MCP endpoint did not start"))

    def begin_close(self) -> None:
        """End the MCP sessions' streams (server shutdown: before connections are awaited)."""
        self._stop.set()

    async def aclose(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 5)
