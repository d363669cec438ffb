"""`eve mcp`: the agent as an MCP server on stdin/stdout (SPEC §13), for an MCP client that
starts eve as one of its servers. Sessions are the data directory's, as for every command;
nothing but the protocol goes to stdout (log lines go to stderr)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from eve_cli.cli._context import DataOption, WorldOption, choose_world
from eve_cli.cli._errors import CliError

if TYPE_CHECKING:
    from eve_cli.runtime import Runtime

AgentOption = Annotated[
    Path | None,
    typer.Option("--agent", metavar="DIR", help="Agent folder (default ./agent or the built-in)."),
]
ModelOption = Annotated[
    str | None, typer.Option("--model", "-m", help="Model string overriding the agent's.")
]


def register(app: typer.Typer) -> None:
    """Add `mcp` to the `eve` application."""
    app.command("mcp")(command)


def command(
    agent: AgentOption = None,
    model: ModelOption = None,
    grace: Annotated[
        float, typer.Option("--grace", help="Seconds running turns get to finish at the end.")
    ] = 5.0,
    data: DataOption = None,
    world: WorldOption = None,
) -> int:
    """Serve the agent to an MCP client over stdio (agent_start, agent_send, agent_get, ...)."""
    import asyncio

    from eve_cli.cli._runtime import runtime_at
    from eve_cli.mcp import sdk_missing

    if (missing := sdk_missing()) is not None:
        raise CliError(missing)
    where = choose_world(data, world, create=True)
    try:
        runtime = runtime_at(where, agent_dir=agent, model=model)
    except CliError:
        raise
    except Exception as exc:  # a broken agent folder or model string: one line, file and line
        raise CliError(f"cannot load the agent: {exc}") from None
    try:
        asyncio.run(_serve(runtime, grace))
    except KeyboardInterrupt:
        return 130
    finally:
        runtime.close()
    return 0


async def _serve(runtime: Runtime, grace: float) -> None:
    from eve_cli.channel import Supervisor
    from eve_cli.mcp import AgentService, build_server, serve_stdio

    def log(line: str) -> None:
        print(f"eve mcp: {line}", file=sys.stderr, flush=True)

    supervisor = Supervisor(runtime, log)
    resumed = supervisor.resume_in_flight()
    if resumed:
        log(f"resuming {len(resumed)} in-flight session(s): {', '.join(resumed)}")
    agent = runtime.agent
    server = build_server(AgentService(runtime, supervisor), agent.name, agent.description)
    try:
        await serve_stdio(server)
    finally:
        await supervisor.close(grace)
