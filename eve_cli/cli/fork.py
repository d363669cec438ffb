"""`eve fork SESSION [--at T.S]`: a new session from a checkpoint of another (SPEC §15)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from eve_cli.cli._context import DataOption, WorldOption, choose_world
from eve_cli.cli._errors import CliError, user_message
from eve_cli.cli._runtime import runtime_at, user_errors


def fork(
    session: Annotated[str, typer.Argument(metavar="SESSION", help="Session id to fork.")],
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="T.S",
            help="The checkpoint: T.S after step S of turn T, T after turn T (default: the "
            "latest).",
        ),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    data: DataOption = None,
    world: WorldOption = None,
) -> None:
    """Fork a session at a checkpoint: print the new session's id. The original is only
    read (another process may be driving it); the fork replays nothing it recorded."""
    import asyncio

    from eve_cli.runtime import InvalidSessionIdError, SessionNotFoundError

    where = choose_world(data, world, create=True)
    errors = user_errors()
    try:
        rt = runtime_at(where, load_agent=False)
    except errors as exc:
        raise CliError(f"cannot open {where}: {user_message(exc)}") from None
    try:
        out = asyncio.run(rt.fork(session, at))
    except (SessionNotFoundError, InvalidSessionIdError) as exc:
        raise CliError(f"{exc} in {where}; list sessions with: eve inspect") from None
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except LookupError as exc:  # no such checkpoint: the message lists them
        raise CliError(str(exc)) from None
    except errors as exc:
        raise CliError(f"session {session}: {user_message(exc)}") from None
    finally:
        rt.close()
    if json_:
        typer.echo(json.dumps(out))
        return
    typer.echo(out["sessionId"])
    typer.echo(
        f"forked {session} at checkpoint {out['checkpoint']}; continue it with: "
        f"eve chat -s {out['sessionId']}",
        err=True,
    )


def register(app: typer.Typer) -> None:
    app.command("fork")(fork)
