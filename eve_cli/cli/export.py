"""`eve export SESSION [-o FILE]`: a session as a test cassette (SPEC §15)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from eve_cli.cli._context import DataOption, WorldOption, choose_world
from eve_cli.cli._errors import CliError
from eve_cli.cli._runtime import open_reader


def export(
    session: Annotated[str, typer.Argument(metavar="SESSION", help="Session id.")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", metavar="FILE", help="Write it here.")
    ] = None,
    redact: Annotated[
        list[str] | None,
        typer.Option(
            "--redact",
            metavar="REGEX",
            help="Replace matches in tool results and arguments by [redacted] (repeatable).",
        ),
    ] = None,
    redact_tool: Annotated[
        list[str] | None,
        typer.Option(
            "--redact-tool", metavar="NAME", help="Replace this tool's results whole (repeatable)."
        ),
    ] = None,
    data: DataOption = None,
    world: WorldOption = None,
) -> None:
    """Write a session as a self-contained JSON cassette (`-m scripted:FILE` plays it, and
    `eve_cli.testing.replay_cassette` checks an agent against it). Secrets never go in."""
    import re

    from eve_cli._cassette import cassette, secret_values
    from eve_cli._env import load_env

    for pattern in redact or []:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise CliError(f"--redact {pattern!r}: not a regular expression: {exc}", 2) from None
    where = choose_world(data, world)
    with open_reader(where) as reader:
        view = reader.session(session)
        events = reader.events(session)
    try:
        env = load_env()
    except Exception:  # a broken .env hides no secret of the environment itself
        env = dict(os.environ)
    tape = cassette(
        session, events, agent=view.get("agent"), model=view.get("model"),
        secrets=secret_values({**env, **os.environ}), redact=redact or [],
        redact_tools=redact_tool or [],
    )  # fmt: skip
    text = json.dumps(tape, indent=1, ensure_ascii=False) + "\n"
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{output}: cannot write the cassette: {exc.strerror or exc}") from None
    turns = len(tape.get("turns") or [])
    typer.echo(f"wrote {output}: {turns} turn(s) of session {session}", err=True)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
