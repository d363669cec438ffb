"""`eve log [SESSION]`: a session's conversation as a readable transcript (default: the latest
session). Plain text at a pipe, rendered Markdown at a terminal, one JSON document with
`--json`. Read-only, like `eve inspect`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from eve_cli._usage import format_usage, usage_totals
from eve_cli.cli._context import DataOption, WorldOption, choose_world
from eve_cli.cli._errors import CliError
from eve_cli.cli._runtime import open_reader
from eve_cli.cli._transcript import dumps, entries, last_exchanges, write_plain


def log(
    session: Annotated[
        str | None,
        typer.Argument(
            metavar="[SESSION]",
            help="Session id (default: the latest).",
            autocompletion=lambda incomplete: complete_session(incomplete),
        ),
    ] = None,
    last: Annotated[
        int | None,
        typer.Option("--last", "-n", metavar="N", help="Only the last N exchanges."),
    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="The transcript as JSON.")] = False,
    data: DataOption = None,
    world: WorldOption = None,
) -> None:
    """Print a session's conversation: messages, replies, tool calls and their results."""
    where = choose_world(data, world)
    if where.url is None and not where.path.is_dir():
        raise CliError(f"no data directory {where}; start a session with: eve chat")
    with open_reader(where) as reader:
        if session is None:
            rows = [row for row in reader.sessions() if "." not in str(row.get("id"))]
            if not rows:
                raise CliError(f"no session in {where}; start one with: eve chat")
            session = str(rows[0]["id"])  # most recently active first
        reader.session(session, 0)  # an unknown id is one clear line (no turns read)
        events = reader.events(session)
        found = entries(events)
        totals, by_turn = usage_totals(events)
    left_out = 0
    if last is not None:
        found, left_out = last_exchanges(found, max(last, 0))
    if json_:
        typer.echo(dumps(found, session, {"usage": {**totals, "turns": by_turn}}))
    elif sys.stdout.isatty():
        from eve_cli.cli._render_rich import RichTranscript

        RichTranscript().show(found, session, left_out)
    else:
        sys.stdout.write(f"session {session}\n")
        if left_out:
            sys.stdout.write(f"({left_out} earlier exchanges not shown)\n")
        write_plain(found, sys.stdout)
    if not json_ and totals["steps"]:
        sys.stdout.write(f"\nusage: {format_usage(totals)}\n")


def complete_session(incomplete: str) -> list[str]:
    """Session ids of the data directory that start with ``incomplete`` (shell completion)."""
    where = choose_world()
    if where.url is None and not where.path.is_dir():
        return []
    try:
        with open_reader(where) as reader:
            ids = [str(row.get("id")) for row in reader.sessions()]
    except Exception:  # completion must never print a traceback into the shell
        return []
    return [sid for sid in ids if sid.startswith(incomplete) and "." not in sid]


def register(app: typer.Typer) -> None:
    app.command("log")(log)
