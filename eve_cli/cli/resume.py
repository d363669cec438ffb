"""`eve resume [SESSION | --all]`: drive interrupted sessions to their next wait point or end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from eve_cli.cli._context import DataOption, WorldOption, choose_world
from eve_cli.cli._errors import CliError, user_message
from eve_cli.cli._events import describe_request
from eve_cli.cli._runtime import open_runtime, user_errors


def resume(
    session: Annotated[str | None, typer.Argument(metavar="[SESSION]", help="Session id.")] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Every interrupted session in the data directory.")
    ] = False,
    data: DataOption = None,
    world: WorldOption = None,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait", metavar="SECONDS", help="If another process owns a session, wait for it."
        ),
    ] = None,
) -> None:
    """Finish interrupted turns: drive sessions until they wait, park or end, then exit."""
    if bool(session) == all_:
        raise CliError("give a SESSION id or --all (see: eve inspect)", 2)
    data_dir = choose_world(data, world, create=True)
    failures = 0
    with open_runtime(data_dir, None, None) as (rt, loop):
        if session:
            try:
                rt.session(session)
            except LookupError:
                raise CliError(f"no session {session} in {data_dir}") from None
            targets = [session]
        else:
            targets = rt.resumable()
            if not targets:
                typer.echo(f"nothing to resume in {data_dir}")
                return
        errors = user_errors()
        for sid in targets:
            try:
                view = loop.run_until_complete(rt.drive(sid, wait=wait))
            except errors as exc:
                failures += 1
                typer.echo(f"{sid}: not resumed: {user_message(exc)}", err=True)
                continue
            typer.echo(f"{sid}: {outcome(view)}")
    if failures:
        raise typer.Exit(1)


def outcome(view: Mapping[str, Any]) -> str:
    """`waiting for the next message`, `parked on approval to run …`, `completed`…"""
    status = str(view.get("status"))
    if status == "waiting":
        return "waiting for the next message"
    if status == "parked":
        pending = view.get("pending") or []
        if pending:
            return "parked, waiting for " + "; ".join(describe_request(p) for p in pending)
        return f"parked on {view.get('parkedOn') or 'input'}"
    return status


def register(app: typer.Typer) -> None:
    app.command("resume")(resume)
