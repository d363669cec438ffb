"""`eve gc --older-than DURATION [--dry-run] [--waiting] [--force] [--json]`: retention.

Removes the data of sessions that ended (completed, failed, cancelled) and that nothing was
stored to for longer than DURATION (`World.family_usage`): the session and its sub-agent runs,
its streams and its hooks (`World.remove_family`). `--waiting` also removes idle sessions
waiting for their next message; `--force` also parked ones (waiting for an approval or an
answer) and interrupted ones (a turn was running when its process died). Leftovers of an
interrupted removal or creation (`World.remnants`) are swept too. Reports the bytes freed.

No flag removes a session a live process owns: "nobody owns it" is proven by taking its lease.
gc holds the lease while it removes and decides again under it (a turn run since the listing
keeps the session); the world removes it only if nothing was delivered since gc decided, and
a process that delivers or takes the lease after finds no session. It works on any world,
through the `World` interface only.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from ._context import DataOption, Where, WorldOption, choose_world
from ._errors import EXIT_USAGE, CliError
from ._tables import human_bytes, when

if TYPE_CHECKING:  # the runtime and Rich are imported by the command, not by `eve --help`
    from eve_cli._retention import Entry


def gc(
    older_than: Annotated[
        str, typer.Option("--older-than", metavar="DURATION", help="e.g. 30m, 12h, 7d.")
    ],
    data: DataOption = None,
    world: WorldOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only report what would be removed.")
    ] = False,
    waiting: Annotated[
        bool, typer.Option("--waiting", help="Also idle sessions waiting for a message.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also parked and interrupted sessions nobody owns (never one a live process "
            "owns: no flag removes that).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Write the report as JSON.")] = False,
) -> None:
    """Remove the data of ended sessions not written to for DURATION; report bytes freed.

    A session a live process owns (running now) is never removed, whatever the flags.
    """
    from eve_cli._retention import FINISHED, FORCED, parse_duration, removed

    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    path = choose_world(data, world)
    if path.url is None and not path.path.is_dir():
        raise CliError(f"{path}: no eve data directory there; pass --data DIR")
    allowed = set(FINISHED) | ({"waiting"} if waiting else set())
    if force:
        allowed |= set(FORCED)
    entries = _collect(path, time.time() - age, allowed, dry_run)
    freed = sum(e.bytes for e in removed(entries))
    if as_json:
        report = {
            "dataDir": str(path),
            "dryRun": dry_run,
            "bytesFreed": 0 if dry_run else freed,
            "bytesToFree": freed,
            "entries": [asdict(e) for e in entries],
        }
        typer.echo(json.dumps(report, indent=2))
        return
    _print(entries, freed, dry_run)


def _collect(where: Where, cutoff: float, allowed: set[str], dry_run: bool) -> list[Entry]:
    from eve_cli._retention import collect, collecting_runtime
    from world import WorldError

    try:
        rt = collecting_runtime(where.url or where.path)
    except WorldError as exc:
        raise CliError(f"{exc}; run `eve doctor`") from None
    try:
        return collect(rt, cutoff, allowed, dry_run)
    finally:
        rt.close()


def _print(entries: list[Entry], freed: int, dry_run: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from eve_cli._retention import removed

    console = Console(highlight=False, soft_wrap=True)
    if entries:
        table = Table(show_edge=False, header_style="bold")
        table.add_column("session", overflow="fold")
        for name in ("status", "last write", "size", "action"):
            table.add_column(name, justify="right" if name == "size" else "left")
        for e in entries:
            table.add_row(e.id, e.status, when(e.last_write), human_bytes(e.bytes), e.action)
        console.print(table)
    done = removed(entries)
    verb = "would remove" if dry_run else "removed"
    console.print(
        f"{verb} {len(done)} session(s), {'would free' if dry_run else 'freed'} "
        f"{human_bytes(freed)} ({freed} bytes)"
    )


def register(app: typer.Typer) -> None:
    app.command("gc")(gc)
