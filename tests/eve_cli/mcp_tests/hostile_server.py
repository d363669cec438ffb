"""A hostile MCP server for the tests: raw JSON-RPC on stdio (no SDK), ``python
hostile_server.py DIR``. Each process appends its pid to ``DIR/pids``; a file ``DIR/mute``
makes it never answer ``initialize``. Its tools, each as the name says:

    echo        answers ``<pid> <text>`` (which process served a call)
    error32000  a JSON-RPC error of code -32000 (the first of the server-error range)
    error       a JSON-RPC error of code -32603
    iserror     a result with ``isError: true``
    hang        never answers
    garbage     a line that is not JSON on stdout, then a normal answer
    exit        the process exits in the middle of the call
    surrogate   a text result holding a lone surrogate (``"\\ud800"`` in its JSON)
    slow        answers ``<pid> slow`` after ``seconds`` (from a thread: the server reads on)

``python hostile_server.py DIR --http PORT`` serves ``echo`` and ``surrogate`` over Streamable
HTTP instead (JSON answers, on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

DIR = Path(sys.argv[1])
TOOLS = ["echo", "error32000", "error", "iserror", "hang", "garbage", "exit", "surrogate", "slow"]
LOCK = threading.Lock()


def send(message: dict[str, Any]) -> None:
    with LOCK:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()


def text(rid: Any, value: str, is_error: bool = False) -> None:
    send({"id": rid, "result": {"content": [{"type": "text", "text": value}],
                                "isError": is_error}})  # fmt: skip


def call(rid: Any, name: str, arguments: dict[str, Any]) -> None:
    if name == "echo":
        text(rid, f"{os.getpid()} {arguments.get('text', '')}")
    elif name == "error32000":
        send({"id": rid, "error": {"code": -32000, "message": "quota exceeded for today"}})
    elif name == "error":
        send({"id": rid, "error": {"code": -32603, "message": "the index is rebuilding"}})
    elif name == "iserror":
        text(rid, "no such file: notes.txt", is_error=True)
    elif name == "hang":
        pass
    elif name == "garbage":
        sys.stdout.write("this is not JSON\n")
        text(rid, "after the garbage")
    elif name == "exit":
        sys.stderr.write("going away mid-call\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "surrogate":  # json.dumps writes the lone surrogate as the escape \ud800
        send({"id": rid, "result": {"content": [{"type": "text", "text": "a\ud800b"}]}})
    elif name == "slow":
        seconds = float(arguments.get("seconds", 1))
        threading.Timer(seconds, text, (rid, f"{os.getpid()} slow")).start()


def main() -> None:
    with open(DIR / "pids", "a") as f:
        f.write(f"{os.getpid()}\n")
    mute = (DIR / "mute").exists()
    for line in sys.stdin:
        request = json.loads(line)
        method, rid = request.get("method"), request.get("id")
        if mute or rid is None:
            continue
        if method == "initialize":
            send({"id": rid, "result": {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"}}})  # fmt: skip
        elif method == "tools/list":
            props = {"text": {"type": "string"}, "seconds": {"type": "number"}}
            schema = {"type": "object", "properties": props}
            tools = [{"name": n, "description": f"{n}.", "inputSchema": schema} for n in TOOLS]
            send({"id": rid, "result": {"tools": tools}})
        elif method == "tools/call":
            params = request["params"]
            call(rid, params["name"], params.get("arguments") or {})
        elif method == "ping":
            send({"id": rid, "result": {}})
        else:
            send({"id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


def serve_http(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def mcp(request: Request) -> Response:
        body = await request.json()
        rid, method = body.get("id"), body.get("method")
        if rid is None:
            return Response(status_code=202)
        result: dict[str, Any] = {}
        if method == "initialize":
            result = {"protocolVersion": body["params"]["protocolVersion"],
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "h", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                                for n in ("echo", "surrogate")]}  # fmt: skip
        elif method == "tools/call":
            said = "a\ud800b" if body["params"]["name"] == "surrogate" else f"{os.getpid()} x"
            result = {"content": [{"type": "text", "text": said}]}
        answer = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result})
        return Response(answer, media_type="application/json")

    app = Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if "--http" in sys.argv:
    serve_http(int(sys.argv[sys.argv.index("--http") + 1]))
else:
    main()
