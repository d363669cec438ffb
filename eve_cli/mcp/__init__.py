"""MCP both ways (SPEC §13).

Client side, tools from MCP servers in an agent: the declarations (``_config``: ``mcp.json``
and ``define_agent(mcp_servers=)``, ``${VAR}`` expanded only in memory), the model's names for
their tools (``_names``), the stdio transport (``_stdio``: servers die with eve), the
per-process server pool (``_pool``), results (``_results``), schemas (``_schemas``) and the
tools the harness dispatches (``_tool``). Served side, the agent as an MCP server: the tools
``agent_start`` / ``agent_send`` / ``agent_get`` / ``agent_respond`` / ``agent_cancel``
(``_serve``) over stdio (``eve mcp``) and Streamable HTTP (``/mcp``).

The SDK (``mcp``) takes a second to import: only ``_pool``, ``_stdio``, ``_results`` and the
served side import it, and this package's names load on first use, so an agent without MCP
servers never pays for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eve_cli.mcp._config import McpConfigError as McpConfigError
    from eve_cli.mcp._config import ServerSpec as ServerSpec
    from eve_cli.mcp._config import load_servers as load_servers
    from eve_cli.mcp._names import exposed_name as exposed_name
    from eve_cli.mcp._pool import McpPool as McpPool
    from eve_cli.mcp._pool import ServerUnavailable as ServerUnavailable

_WHERE = {
    "McpConfigError": "_config",
    "ServerSpec": "_config",
    "load_servers": "_config",
    "exposed_name": "_names",
    "McpPool": "_pool",
    "ServerUnavailable": "_pool",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"eve_cli.mcp.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
