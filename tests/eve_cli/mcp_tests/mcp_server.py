"""A real MCP server for the tests, on the SDK's low-level server: ``python mcp_server.py DIR``
serves stdio, ``... DIR --http PORT`` Streamable HTTP on 127.0.0.1.

``DIR`` is the test's control folder: each call appends ``call <tool> <key>`` to
``calls.log`` when it begins and ``done <tool> <key>`` when it ends (``key``: the idempotency
key from the request's ``_meta``); a file ``stall`` makes the next ``record`` call remove it,
create ``stalled`` and hang; a file ``late`` adds the tool ``late`` to the listing; a file
``fail-start`` makes the server write to stderr and exit before it serves. The server writes
its arguments to ``argv`` and, over HTTP, each request's ``authorization`` header to
``auth.log``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any

DIR = Path(sys.argv[1])
if (DIR / "fail-start").exists():  # before the SDK's import: a failing start costs little
    sys.stderr.write("starting\ncannot open the database: permission denied\n")
    sys.exit(2)

import mcp_types as types  # noqa: E402
from mcp.server.lowlevel import Server  # noqa: E402
from mcp.server.stdio import stdio_server  # noqa: E402

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
KEY = "eve/idempotencyKey"


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> types.Tool:
    schema = {"type": "object", "properties": properties, "required": required}
    return types.Tool(name=name, description=f"The {name} tool.", input_schema=schema)


TOOLS = [
    _tool("add", {"a": {"type": "integer"}, "b": {"type": "integer"}}, ["a", "b"]),
    _tool("record", {"text": {"type": "string"}}, ["text"]),
    _tool("image", {}, []),
    _tool("crash", {}, []),
    _tool("slow", {"seconds": {"type": "number"}}, ["seconds"]),
    _tool("huge", {"size": {"type": "integer"}}, ["size"]),
    types.Tool(name="broken", input_schema={"type": "object", "properties": {"x": {"type": 5}}}),
]


def log(line: str) -> None:
    with open(DIR / "calls.log", "a") as f:
        f.write(line + "\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    late = [_tool("late", {}, [])] if (DIR / "late").exists() else []
    return types.ListToolsResult(tools=[*TOOLS, *late])


def text(value: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=value)]


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    key = (params.meta or {}).get(KEY, "-")
    name = params.name
    request = getattr(ctx, "request", None)
    if request is not None and hasattr(request, "headers"):
        with open(DIR / "auth.log", "a") as f:
            f.write(f"{request.headers.get('authorization')}\n")
    log(f"call {name} {key}")
    if name == "add":
        result = types.CallToolResult(content=text(str(args["a"] + args["b"])))
    elif name == "record":
        if (DIR / "stall").exists():
            (DIR / "stall").unlink()
            # Whole or not at all: the test reads the pid as soon as the name exists.
            (DIR / "stalled.tmp").write_text(str(os.getpid()))
            os.replace(DIR / "stalled.tmp", DIR / "stalled")
            await asyncio.sleep(60)
        result = types.CallToolResult(
            content=text(f"recorded {args['text']}"), structured_content={"text": args["text"]}
        )
    elif name == "image":
        data = base64.b64encode(PNG).decode()
        image = types.ImageContent(type="image", data=data, mime_type="image/png")
        result = types.CallToolResult(content=[*text("a pixel"), image])
    elif name == "crash":
        sys.stderr.write(f"boom: crashing on purpose (argv {sys.argv[2:]})\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "slow":
        await asyncio.sleep(float(args["seconds"]))
        result = types.CallToolResult(content=text("slept"))
    elif name == "huge":
        result = types.CallToolResult(content=text("x" * int(args["size"])))
    else:
        result = types.CallToolResult(content=text(f"no tool {name}"), is_error=True)
    log(f"done {name} {key}")
    return result


server = Server("test-server", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    with open(DIR / "pids", "a") as f:
        f.write(f"{os.getpid()}\n")
    (DIR / "argv").write_text(" ".join(sys.argv[2:]))
    if "--http" in sys.argv:
        import uvicorn

        port = int(sys.argv[sys.argv.index("--http") + 1])
        app = server.streamable_http_app()
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        await uvicorn.Server(config).serve()
        return
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    asyncio.run(main())
