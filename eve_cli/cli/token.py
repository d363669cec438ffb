"""`eve token`: a new random bearer token and the digest a tokens file names it by (SPEC §18);
with ``--stdin``, the digest of a token read from standard input."""

from __future__ import annotations

import secrets
import sys
from typing import Annotated

import typer

from eve_cli.cli._errors import CliError


def register(app: typer.Typer) -> None:
    """Add `token` to the `eve` application."""
    app.command("token")(token)


def token(
    stdin: Annotated[
        bool, typer.Option("--stdin", help="Digest the token read from standard input.")
    ] = False,
) -> int:
    """Make a bearer token (printed once: give it to its holder) and its `sha256:` digest for
    `--auth-tokens` files and define_auth(tokens=)."""
    from eve_cli.auth import digest

    if stdin:
        given = sys.stdin.readline().strip()
        if not given:
            raise CliError("no token on standard input", 2)
        typer.echo(digest(given))
        return 0
    made = secrets.token_urlsafe(32)
    typer.echo(f"token:  {made}")
    typer.echo(f"digest: {digest(made)}")
    return 0
