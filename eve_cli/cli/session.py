"""`eve session move SESSION --agent NAME|FOLDER`: give a session to another agent (SPEC §3: a
session belongs to its agent's name); the move is one of its events (``session.moved``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

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
        # Messages waiting for the session are taken by the agent it moves to, right after
        # the move: here only if this process serves that agent (a folder was given).
        waiting = into is None and sid in rt.resumable()
        try:
            receipt = loop.run_until_complete(rt.move_session(sid, name, into))
        except ValueError as exc:  # a sub-agent's session
            raise CliError(str(exc)) from None
        if receipt.disposition == "rejected":
            raise CliError(f"session {sid} not moved: {receipt.reason}")
        if waiting:
            typer.echo(f"session {sid}: moving to agent {name!r}: the process serving it "
                       "applies the move, then answers the messages waiting")  # fmt: skip
        elif _applied(rt, loop, sid, name):
            typer.echo(f"session {sid}: moved from agent {before!r} to {name!r}")
        else:
            typer.echo(f"session {sid}: moving to agent {name!r} (the process serving it "
                       "applies the move between turns)")  # fmt: skip


def _applied(rt: Any, loop: Any, sid: str, name: str) -> bool:
    """Apply the move delivered to ``sid`` (its driver does, between turns): here, or by the
    process serving it, seen in its events within `APPLIED_WITHIN` (False: not yet)."""
    from world import OwnershipError

    try:
        loop.run_until_complete(rt.drive(sid))
    except OwnershipError:
        deadline = time.monotonic() + APPLIED_WITHIN
        while rt.session(sid).get("agent") != name:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
    return True


def register(app: typer.Typer) -> None:
    app.command("session")(session)
