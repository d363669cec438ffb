"""`eve schedules [--json] [--run NAME]`: the agent's schedules with their next and last runs and
the sessions they made; `--run NAME` starts one now and drives it to its next wait."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from eve_cli.cli._context import DataOption, WorldOption, choose_world
from eve_cli.cli._errors import CliError
from eve_cli.cli._runtime import open_runtime

if TYPE_CHECKING:
    from eve_cli._schedules import ScheduleRow


def schedules(
    agent: Annotated[
        Path | None, typer.Option("--agent", metavar="DIR", help="Agent folder (default ./agent).")
    ] = None,
    data: DataOption = None,
    world: WorldOption = None,
    json_: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    run: Annotated[
        str | None,
        typer.Option("--run", metavar="NAME", help="Start schedule NAME now and drive it."),
    ] = None,
) -> None:
    """List the agent's schedules (schedules/*.md): when they tick, next and last runs."""
    from eve_cli.cli.resume import outcome

    data_dir = choose_world(data, world, create=run is not None)
    # Listing reads the schedule files and the agent's name (its agent.py), not its tools.
    with open_runtime(data_dir, agent, None, load_agent=run is not None) as (rt, loop):
        rows, problems = rt.schedule_rows()
        for problem in problems:
            typer.echo(f"eve: error: schedule not loaded: {problem}", err=True)
        if run is not None:
            try:
                sid = loop.run_until_complete(rt.run_schedule_now(run))
            except LookupError as exc:
                raise CliError(str(exc)) from None
            view = loop.run_until_complete(rt.drive(sid))
            typer.echo(f"{sid}: {outcome(view)}")
        elif json_:
            typer.echo(json.dumps({"schedules": rows, "problems": problems}, ensure_ascii=False))
        elif not rows and not problems:
            typer.echo(f"no schedules in {rt.agent_dir / 'schedules'}")
        else:
            for line in _table(rows):
                typer.echo(line)
    if problems:
        raise typer.Exit(1)


def _table(rows: list[ScheduleRow]) -> list[str]:
    header = ("NAME", "WHEN", "ZONE", "MODE", "MISSED", "NEXT", "LAST", "SESSIONS")
    body = [
        (
            r["name"], r["when"], r["timezone"], r["mode"], r["missed"], r["next"] or "-",
            f"{r['last']} {r['lastSession']}" if r["last"] else "-", str(r["sessions"]),
        )
        for r in rows
    ]  # fmt: skip
    widths = [max(len(str(row[i])) for row in (header, *body)) for i in range(len(header))]
    return ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
            for row in (header, *body)]  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("schedules")(schedules)
