"""The agent as an MCP server (SPEC §13): the SDK's low-level server with the five
``agent_*`` tools of :class:`~eve_cli.mcp._service.AgentService`, over stdio (``eve mcp``) or
Streamable HTTP (``_endpoint.McpEndpoint``, ``/mcp`` of ``eve start`` / ``eve dev``).

Each answer is the service's data as JSON text and as structured content. A call that cannot
be served (bad arguments, an unknown session, a rejected delivery) is a tool error with one
line, never a protocol error, so a model driving eve can read it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server

from eve_cli._json import JSONObject
from eve_cli._version import __version__
from eve_cli.auth import LOCAL, Principal
from eve_cli.channel import principal_of
from eve_cli.mcp._schemas import argument_problem
from eve_cli.mcp._service import AgentService, Answer, Progress, ServiceError

_ID: JSONObject = {"type": "string", "description": "The session id an earlier call returned."}
_WAIT: JSONObject = {
    "type": "number",
    "minimum": 0,
    "description": "Seconds to wait for the session to settle before answering (at most 300).",
}
_RESPONSE: JSONObject = {
    "type": "object",
    "properties": {
        "requestId": {"type": "string"},
        "approved": {"type": "boolean"},
        "always": {"type": "boolean"},
        "answer": {"type": "string"},
        "outcome": {"type": "string", "enum": ["rerun", "failed", "result"]},
        "result": {"type": "string"},
    },
    "required": ["requestId"],
}


# The JSON schema the answer to the turn a message starts must follow (a `result` event).
_SCHEMA: JSONObject = {
    "type": "object",
    "description": "JSON schema of the answer (a result event)",
}


def _tool(name: str, description: str, props: JSONObject, required: list[str]) -> types.Tool:
    schema = {"type": "object", "properties": props, "required": required,
              "additionalProperties": False}  # fmt: skip
    return types.Tool(name=name, description=description, input_schema=schema)


TOOLS = [
    _tool(
        "agent_start",
        "Start a session with a first message. The same `key` again returns that session "
        "(its message is delivered once). Answers the session id, status and events.",
        {
            "message": {"type": "string"},
            "key": {"type": "string"},
            "wait": _WAIT,
            "outputSchema": _SCHEMA,
        },
        ["message"],
    ),
    _tool(
        "agent_send",
        "Send a message to a session: it starts a turn, steers the running one (`steer`, the "
        "default) or waits for the next (`queue`).",
        {
            "sessionId": _ID,
            "message": {"type": "string"},
            "policy": {"enum": ["steer", "queue"]},
            "wait": _WAIT,
            "outputSchema": _SCHEMA,
        },
        ["sessionId", "message"],
    ),
    _tool(
        "agent_get",
        "A session's status, pending requests, its current turn's reply and events from index "
        "`since` (answer `next` is where to ask from next); `wait` seconds for news first.",
        {"sessionId": _ID, "since": {"type": "integer", "minimum": 0}, "wait": _WAIT},
        ["sessionId"],
    ),
    _tool(
        "agent_respond",
        "Answer pending requests: approvals {requestId, approved, always?}, questions "
        "{requestId, answer}, and a call interrupted with its outcome unknown {requestId, "
        "outcome: rerun | failed | result, result?}.",
        {
            "sessionId": _ID,
            "responses": {"type": "array", "items": _RESPONSE, "minItems": 1},
            "wait": _WAIT,
        },
        ["sessionId", "responses"],
    ),
    _tool("agent_cancel", "Cancel a session's running turn.", {"sessionId": _ID}, ["sessionId"]),
]
_SCHEMAS = {tool.name: tool.input_schema for tool in TOOLS}

# (the service, the arguments as the client sent them, checked against the tool's schema,
# progress, the caller) -> the answer.
Handler = Callable[[AgentService, dict[str, Any], Progress, Principal], Awaitable[Answer]]
HANDLERS: dict[str, Handler] = {
    "agent_start": lambda s, a, p, w: s.start(
        a["message"], a.get("key"), a.get("wait", 0), p, a.get("outputSchema"), w
    ),
    "agent_send": lambda s, a, p, w: s.send(
        a["sessionId"],
        a["message"],
        a.get("policy", "steer"),
        a.get("wait", 0),
        p,
        a.get("outputSchema"),
        w,
    ),
    "agent_get": lambda s, a, p, w: s.get(a["sessionId"], a.get("since", 0), a.get("wait", 0), w),
    "agent_respond": lambda s, a, p, w: s.respond(
        a["sessionId"], a["responses"], a.get("wait", 0), p, w
    ),
    "agent_cancel": lambda s, a, p, w: s.cancel(a["sessionId"], w),
}


def build_server(service: AgentService, name: str, description: str = "") -> Server[Any]:
    """The MCP server of one agent."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        handler = HANDLERS.get(params.name)
        if handler is None:
            return _error(f"no tool {params.name!r}: eve serves {', '.join(HANDLERS)}")
        if problem := argument_problem(_SCHEMAS[params.name], arguments):
            return _error(f"invalid arguments for {params.name}: {problem}")

        async def progress(count: int, message: str) -> None:
            await ctx.session.report_progress(count, None, message)

        try:
            result = await handler(service, arguments, progress, _caller(ctx))
        except ServiceError as exc:
            return _error(str(exc))
        text = json.dumps(result, default=str, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=json.loads(text),
        )

    return Server(
        name,
        version=__version__,
        instructions=(
            f"The eve agent {name!r}{': ' + description if description else ''}. Start a "
            "session with agent_start, follow it with agent_get, answer its approvals and "
            "questions with agent_respond. Sessions are durable: keep the session id."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _caller(ctx: Any) -> Principal:
    """The principal of a call: the HTTP request's (`/mcp` of `eve start`), or the person at
    this machine (`eve mcp` on stdio)."""
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None)
    return principal_of(scope) if isinstance(scope, dict) else LOCAL


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve ``server`` on this process's stdin and stdout until the client closes them."""
    from eve_cli.mcp._serve_stdio import open_stdio

    async with open_stdio() as (read, write):
        await server.run(read, write, server.create_initialization_options())
