"""What MCP servers' tools cost an agent (issue 18), with a real stdio server written with the
SDK (a no-op tool) in the scratch directory.

* ``mcp.step``: seconds per step whose tool call goes to the MCP server (``baseline``: the
  same steps calling a local no-op tool, turns alternated in one run; medians over turns).
  Each step is the model call plus the durable tool action; the MCP one adds a JSON-RPC
  round trip over the server's pipes.
* ``mcp.start``: seconds from a pool with no server to its first tool listing (the process
  start, the SDK's import in the server, the handshake): what the first turn of a process
  waits once.
* ``mcp.list``: seconds a turn spends reading the tools of a running server (median).
* ``mcp.call``: seconds of one call through the pool alone, nothing journaled (median): the
  round trip's share of ``mcp.step``; the rest is the step's durable records, which a tool
  that waits on I/O cannot share with the model call's (see ``step_overhead.waiting``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import call, median, scratch, write_agent

SERVER = """
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
import anyio

async def list_tools(ctx, params):
    schema = {"type": "object", "properties": {}}
    return types.ListToolsResult(tools=[types.Tool(name="noop", input_schema=schema)])

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

server = Server("bench", on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""


def _script(turns: int, steps: int, tool: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for _ in range(turns):
        entries += [{"text": "", "tool_calls": [call(tool)]} for _ in range(steps - 1)]
        entries.append({"text": "done", "tool_calls": []})
    return entries


def run(quick: bool) -> Iterator[dict[str, Any]]:
    steps, turns, lists = (3, 2, 3) if quick else (20, 10, 30)
    with scratch("mcp") as root:
        yield from _measure(root, steps, turns, lists)


def _measure(root: Path, steps: int, turns: int, lists: int) -> Iterator[dict[str, Any]]:
    from eve_cli._agent_api import ToolContext
    from eve_cli._loader import load_agent
    from eve_cli.runtime import Runtime

    server = root / "server.py"
    server.write_text(SERVER)
    servers = {"mcpServers": {"bench": {"command": sys.executable, "args": [str(server)]}}}
    local = write_agent(root / "local", _script(turns, steps, "noop"))
    remote = write_agent(root / "remote", _script(turns, steps, "mcp__bench__noop"))
    (remote / "mcp.json").write_text(json.dumps(servers))
    runtimes = {kind: Runtime(data_dir=root / "data", agent_dir=d) for kind, d in
                (("local", local), ("remote", remote))}  # fmt: skip
    per_step: dict[str, list[float]] = {kind: [] for kind in runtimes}
    specs = load_agent(remote).mcp

    async def main() -> tuple[float, list[float], list[float]]:
        sids = {kind: await rt.create_session() for kind, rt in runtimes.items()}
        pool = runtimes["remote"].executor.mcp
        began = time.perf_counter()
        await pool.hydrate(specs)  # started before the turns
        start = time.perf_counter() - began
        for _ in range(turns):
            for kind, rt in runtimes.items():
                await rt.deliver(sids[kind], "go")
                began = time.perf_counter()
                await rt.drive(sids[kind], view=False)
                per_step[kind].append((time.perf_counter() - began) / steps)
        warm, calls = [], []
        ctx = ToolContext("bench", "call", "bench:call")
        for _ in range(lists):
            began = time.perf_counter()
            await pool.hydrate(specs)
            warm.append(time.perf_counter() - began)
            began = time.perf_counter()
            await pool.call(specs[0], "mcp__bench__noop", {}, ctx)
            calls.append(time.perf_counter() - began)
        return start, warm, calls

    try:
        start, warm, calls = asyncio.run(main())
    finally:
        for rt in runtimes.values():
            rt.close()
    remote_step, local_step = median(per_step["remote"]), median(per_step["local"])
    yield measurement("mcp.step", remote_step, "s", baseline=local_step, steps=steps * turns)
    yield measurement("mcp.start", start, "s")
    yield measurement("mcp.list", median(warm), "s", samples=lists)
    yield measurement("mcp.call", median(calls), "s", samples=lists)
