"""`eve session move SESSION --agent NAME|FOLDER`: give a session to another agent (SPEC §3: a
session belongs to its agent's name); the move is one of its events (``session.moved``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from eve_cli.cli._context import DataOption, WorldOption, choose_world
from eve_cli.cli._errors import CliError
from eve_cli.cli._runtime import open_runtime

APPLIED_WITHIN = 10.0  # seconds the process serving a session gets to apply its move


def session(
    action: Annotated[str, typer.Argument(metavar="move", help="What to do: move.")],
    sid: Annotated[str, typer.Argument(metavar="SESSION", help="Session id.")],
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            metavar="NAME|FOLDER",
            help="The agent the session goes to: its folder, or its name (a folder of that "
            "name serves it then).",
        ),
    ],
    data: DataOption = None,
    world: WorldOption = None,
) -> None:
    """Move a session to another agent between its turns: its next turns run that agent."""
    from world import OwnershipError

    if action != "move":
        raise CliError(f"unknown session action {action!r}; expected: move", 2)
    folder = Path(agent).expanduser()
    if not folder.is_dir() and ("/" in agent or agent.startswith(".")):
        raise CliError(f"--agent {agent}: no such agent folder (give a folder or a name)", 2)
    where = choose_world(data, world, create=True)
    with open_runtime(where, folder if folder.is_dir() else None, None) as (rt, loop):
        name = rt.agent.name if folder.is_dir() else agent
        try:
            before = rt.session(sid).get("agent")
        except LookupError:
            raise CliError(f"no session {sid} in {where}") from None
        if before == name:
            typer.echo(f"session {sid} is agent {name!r} already")
            return
        into = str(folder.resolve()) if folder.is_dir() else None
        try:
            receipt = loop.run_until_complete(rt.move_session(sid, name, into))
        except ValueError as exc:  # a sub-agent's session
            raise CliError(str(exc)) from None
        if receipt.disposition == "rejected":
            raise CliError(f"session {sid} not moved: {receipt.reason}")
        try:  # the move is applied by the session's driver, between turns: now, here
            loop.run_until_complete(rt.drive(sid))
        except OwnershipError:  # by the process serving it: seen in its events
            deadline = time.monotonic() + APPLIED_WITHIN
            while rt.session(sid).get("agent") != name:
                if time.monotonic() > deadline:
                    typer.echo(f"session {sid}: moving to agent {name!r} (the process serving "
                               "it applies the move between turns)")  # fmt: skip
                    return
                time.sleep(0.1)
        typer.echo(f"session {sid}: moved from agent {before!r} to {name!r}")


def register(app: typer.Typer) -> None:
    app.command("session")(session)
