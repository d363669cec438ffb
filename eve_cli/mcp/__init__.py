"""MCP both ways (SPEC §13).

Client side, tools from MCP servers in an agent: the declarations (``_config``: ``mcp.json``
and ``define_agent(mcp_servers=)``, ``${VAR}`` expanded only in memory), the model's names for
their tools (``_names``), the stdio transport (``_stdio``: servers die with eve), one server's
connection (``_connection``), the per-process pool of them (``_pool``), results (``_results``),
schemas (``_schemas``) and the tools the harness dispatches (``_tool``). Served side, the agent
as an MCP server: the five tools' logic (``_service``), the SDK server (``_serve``: ``eve
mcp`` over stdio) and ``/mcp`` on the HTTP channel (``_endpoint``).

The SDK (``mcp``) takes a second to import: only ``_connection``, ``_pool``, ``_stdio``,
``_results`` and ``_serve`` import it (``_endpoint`` at its first request), and this package's
names load on first use, so an agent without MCP servers never pays for it. Nothing here
imports from ``eve_cli.cli``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eve_cli.mcp._config import McpConfigError as McpConfigError
    from eve_cli.mcp._config import ServerSpec as ServerSpec
    from eve_cli.mcp._config import load_servers as load_servers
    from eve_cli.mcp._connection import ServerUnavailable as ServerUnavailable
    from eve_cli.mcp._endpoint import McpEndpoint as McpEndpoint
    from eve_cli.mcp._names import PREFIX as PREFIX
    from eve_cli.mcp._names import exposed_name as exposed_name
    from eve_cli.mcp._names import server_of as server_of
    from eve_cli.mcp._pool import McpPool as McpPool
    from eve_cli.mcp._serve import build_server as build_server
    from eve_cli.mcp._serve import serve_stdio as serve_stdio
    from eve_cli.mcp._service import AgentService as AgentService
    from eve_cli.mcp._tool import find_tool as find_tool
    from eve_cli.mcp._tool import turn_tools as turn_tools

_WHERE = {
    "McpConfigError": "_config",
    "ServerSpec": "_config",
    "load_servers": "_config",
    "PREFIX": "_names",
    "exposed_name": "_names",
    "server_of": "_names",
    "McpPool": "_pool",
    "ServerUnavailable": "_connection",
    "McpEndpoint": "_endpoint",
    "build_server": "_serve",
    "serve_stdio": "_serve",
    "AgentService": "_service",
    "find_tool": "_tool",
    "turn_tools": "_tool",
}

__all__ = sorted([*_WHERE, "sdk_missing"])


def sdk_missing() -> str | None:
    """Why MCP cannot be used here, in one line: the SDK is an extra (None: it is installed)."""
    if all(importlib.util.find_spec(name) is not None for name in ("mcp", "mcp_types")):
        return None
    return "MCP needs the mcp package, which is not installed: pip install 'eve-durable[mcp]'"


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"eve_cli.mcp.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
