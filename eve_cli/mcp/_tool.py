"""MCP tools as the harness sees them: a :class:`McpTool` per call (found by its name alone,
with no server contacted, so a replay dispatches as the live run did) and the tool specs of a
turn (read from the servers, inside the model call, which a replay does not repeat).

A call runs as any tool's: a durable action of the step, whose journaled result a replay
returns; only the action in flight at a crash runs again, and its idempotency key travels in
the request's ``_meta``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eve_cli._agent_api import ToolContext
from eve_cli._json import JSONObject
from eve_cli._tools import InvalidArguments, Tool, ToolResult
from eve_cli.mcp._config import ServerSpec
from eve_cli.mcp._names import PREFIX, exposed_name, server_of
from eve_cli.models import ToolSpec

if TYPE_CHECKING:
    from eve_cli.mcp._pool import McpPool


@dataclass(frozen=True)
class McpTool(Tool):
    """One MCP server's tool (``mcp_name``: its name on the server, when the model's name
    says it; else it is looked up in the server's listing at the call)."""

    server: ServerSpec | None = None
    mcp_name: str | None = None
    pool: McpPool | None = None

    def validate(self, arguments: JSONObject | None) -> JSONObject:
        if not isinstance(arguments, dict):
            raise InvalidArguments(f"arguments must be a JSON object, got {arguments!r}")
        return dict(arguments)  # the server's schema is checked at the call

    async def invoke(self, kwargs: JSONObject, ctx: ToolContext, wait: float) -> ToolResult:
        assert self.server is not None and self.pool is not None
        return await self.pool.call(self.server, self.name, kwargs, ctx)


def find_tool(specs: Sequence[ServerSpec], name: str, pool: McpPool) -> McpTool | None:
    """The tool the model's ``name`` stands for among ``specs``' servers, from the names
    alone (None: no such server, or its allow/deny lists leave the tool out)."""
    server = server_of(name)
    spec = next((s for s in specs if s.name == server), None) if server else None
    if spec is None:
        return None
    mcp_name = _named(spec, name)
    if mcp_name is not None and not spec.allows(mcp_name):
        return None
    if spec.allow is not None and mcp_name is None:
        return None
    return McpTool(
        name=name,
        description="",
        parameters={},
        approval=spec.policy(mcp_name) if mcp_name is not None else spec.approval,
        fn=None,
        args_model=None,
        source=spec.source,
        server=spec,
        mcp_name=mcp_name,
        pool=pool,
    )


def _named(spec: ServerSpec, name: str) -> str | None:
    """The MCP name behind ``name``: one the declaration names, or the name itself when the
    model's name keeps it whole."""
    declared: set[str] = {*(spec.allow or ()), *spec.deny, *(t for t, _ in spec.tool_approval)}
    for tool in declared:
        if exposed_name(spec.name, tool) == name:
            return tool
    plain = name[len(PREFIX) + len(spec.name) + 2 :]
    return plain if exposed_name(spec.name, plain) == name else None


async def turn_tools(specs: Sequence[ServerSpec], pool: McpPool) -> tuple[list[ToolSpec], str]:
    """The model's specs of every allowed tool of the servers, read now, and a note for the
    system prompt naming the servers that are unavailable ("" when none is)."""
    listed, unavailable = await pool.hydrate(specs)
    tools = [
        ToolSpec(t.exposed, t.description or f"{t.name} (MCP server {t.server})", t.schema)
        for t in listed
    ]
    note = ""
    if unavailable:
        note = "\n\nThese MCP servers are unavailable now, so their tools are missing:\n" + (
            "\n".join(f"- {line}" for line in unavailable)
        )
    return tools, note
