"""`eve doctor [--data DIR] [--repair] [--json]`: verify every file of a data directory.

Reads every journal, inbox, stream (and its index), head, lock and hook, and reports what it
found. `--repair` fixes what can be fixed without losing anything (`world.repair`): torn tails
are cut, damaged records are replaced in place by gap records of their length, unreadable files
are moved to `quarantine/` under the data directory — never deleted; every byte replaced or cut
is kept there, with a `NOTE.txt`. What a repair replaced is listed afterwards (`lost`), and
by session and turn: the turn's message, the step, what of it is gone (`eve_cli._losses`; JSON
`losses`); a session a replaced record leaves unable to go on is `damaged`, as `eve chat` and
`eve inspect` say too, with the same turn. Exit code 0 when nothing is damaged (torn tails
and stale caches are recovered on open), 1 when damage remains.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from typing import TYPE_CHECKING, Annotated

import typer

from ._context import DataOption, Where, WorldOption, choose_world
from ._errors import EXIT_ERROR, EXIT_OK, CliError
from ._runtime import open_reader

if TYPE_CHECKING:  # the world, the runtime and Rich are imported by the command, not by --help
    from rich.table import Table

    from eve_cli._losses import Loss
    from world import Finding, World

_STYLES = {"ok": "green", "held": "cyan", "repaired": "green", "quarantined": "yellow"}


def doctor(
    data: DataOption = None,
    world: WorldOption = None,
    fix: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Cut torn tails, replace damaged records in place; keep every byte in "
            "quarantine/ (never delete).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Write the findings as JSON.")] = False,
    show_all: Annotated[
        bool, typer.Option("--all", help="List every file, not only those with a problem.")
    ] = False,
    migrate: Annotated[
        bool,
        typer.Option(
            "--migrate",
            help="Migrate a store of an older format (what any command opening it does); "
            "without it doctor only says what the migration would do.",
        ),
    ] = False,
) -> int:
    """Verify every journal, stream, head and lock of the data directory; optionally repair."""
    from eve_cli.runtime import open_world
    from world import StoreFormatError, WorldError

    path = choose_world(data, world)
    try:
        store = open_world(path.url or path.path, create=False, check=False)
        try:
            _migration(store, path, migrate)
            done = store.verify(repair=True) if fix else []
            findings = store.verify()
        finally:
            store.close()
    except StoreFormatError as exc:
        raise CliError(str(exc)) from None  # an eve store, of another format
    except WorldError as exc:
        raise CliError(f"{exc}; pass --data DIR with an eve data directory") from None
    lost, findings = _losses(path, findings)
    damaged = [f for f in findings if f.error]
    if as_json:
        out = {
            "dataDir": str(path),
            "ok": not damaged,
            "findings": [f.as_dict() for f in findings],
            "repairs": [f.as_dict() for f in done],
            "losses": [loss.as_dict() for loss in lost],
        }
        typer.echo(json.dumps(out, indent=2))
    else:
        _print(findings, done, show_all, fix)
        _print_losses(lost)
    return EXIT_ERROR if damaged else EXIT_OK


def _migration(store: World, path: Where, migrate: bool) -> None:
    """A store of an older format is migrated (`--migrate`, said in one line) or, without
    it, the one line is what the migration would do, and doctor stops: the store's files
    are checked in the current format only."""
    from world import LocalWorld

    if not isinstance(store, LocalWorld):
        return  # a database migrates its schema when opened (numbered, `_pg_schema`)
    plan = store.plan_migration()
    if plan is None:
        return
    if not migrate:
        raise CliError(
            f"{plan}; any eve command that opens it migrates it, or run `eve doctor --migrate`"
        )
    opened = LocalWorld(path.path, create=False)
    opened.close()
    if opened.migration is not None:
        typer.echo(str(opened.migration), err=True)


def _losses(path: Where, findings: list[Finding]) -> tuple[list[Loss], list[Finding]]:
    """What repairs replaced, by session and turn (`eve_cli._losses`), for every session a
    `lost` or `damaged` finding names; and the findings, where a session's model context
    needs a stream item a repair replaced with that stream `damaged` (as `chat` says)."""
    from world import Finding, WorldError

    sessions = sorted(
        {f.family for f in findings if f.state in ("lost", "damaged") and f.family is not None}
    )
    if not sessions:
        return [], findings
    from eve_cli._losses import context_damage, losses

    found: list[Loss] = []
    blocked: list[Finding] = []
    try:
        with open_reader(path) as rt:
            for sid in sessions:
                with contextlib.suppress(WorldError, LookupError, ValueError):
                    found.extend(losses(rt, sid))
                exc = context_damage(rt, sid)
                if exc is not None:  # the lost item's stream (`exc.file` names it) is damaged
                    stream = next((f for f in findings if exc.file in f.path), None)
                    where = stream.path if stream is not None else exc.file
                    detail = f"{exc.what}; {exc.advice}"
                    blocked.append(
                        Finding(where, "stream", "damaged", detail, exc.offset, family=sid)
                    )
    except CliError:
        return found, findings  # the findings say why it cannot be read
    replaced = {f.path for f in blocked}
    return found, [f for f in findings if f.path not in replaced] + blocked


def _print_losses(lost: list[Loss]) -> None:
    from rich.console import Console

    if not lost:
        return
    console = Console(highlight=False, soft_wrap=True)
    console.print("lost in repairs, by session and turn (the bytes are in quarantine/):")
    for loss in lost:
        console.print(f"  {loss.session}: {loss.line()}")


def _print(findings: list[Finding], done: list[Finding], show_all: bool, fixed: bool) -> None:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    if done:
        console.print(_table("repairs", done))
    shown = findings if show_all else [f for f in findings if not f.ok]
    if shown:
        console.print(_table("findings", shown))
    console.print(_summary(findings, fixed))


def _summary(findings: list[Finding], fixed: bool) -> str:
    """What was checked, and what to do next."""
    counts = Counter("errors" if f.error else "ok" if f.ok else "warnings" for f in findings)
    summary = (
        f"{len(findings)} file(s) checked: {counts['ok']} ok, {counts['warnings']} warning(s), "
        f"{counts['errors']} damaged"
    )
    return summary + _next_step(findings, fixed, bool(counts["warnings"]))


def _next_step(findings: list[Finding], fixed: bool, warnings: bool) -> str:
    repairable = [f for f in findings if f.error and f.state != "damaged"]
    ended = [f for f in findings if f.state == "damaged"]
    if repairable and not fixed:
        return " — run `eve doctor --repair` (it keeps every byte it replaces in quarantine/)"
    if ended:
        return (
            f" — {len(ended)} file(s) leave their session unable to go on (each row says which "
            "and what was lost; the bytes are in quarantine/): start a new session with "
            "`eve chat`"
        )
    if any(f.state == "lost" for f in findings):
        return " — what earlier repairs replaced is listed above; the sessions go on"
    if warnings and not fixed:
        return (
            " — harmless: every reader skips a torn tail or leftover and rebuilds a stale cache "
            "from the data; `eve doctor --repair` tidies them"
        )
    return ""


def _table(title: str, rows: list[Finding]) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_edge=False, header_style="bold", title_justify="left")
    table.add_column("file", overflow="fold")  # the whole path, even on a narrow terminal
    for name in ("kind", "state", "offset", "detail"):
        table.add_column(name, justify="right" if name == "offset" else "left")
    for f in rows:
        style = _STYLES.get(f.state, "red" if f.error else "yellow")
        offset = "" if f.offset is None else str(f.offset)
        table.add_row(f.path, f.kind, Text(f.state, style=style), offset, f.detail)
    return table


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
