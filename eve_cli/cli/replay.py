"""`eve replay SESSION|CASSETTE|--all`: run recorded sessions against the current agent code
with the recorded model answers and tool results, and report where it behaves otherwise
(SPEC §15). Exit 0: nothing diverged; 4: something did."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NotRequired, TypedDict

import typer

from eve_cli.cli._context import DataOption, WorldOption, choose_world
from eve_cli.cli._errors import EXIT_DIVERGED, CliError, user_message
from eve_cli.cli._runtime import open_reader, user_errors

if TYPE_CHECKING:
    from eve_cli._cassette import Cassette
    from eve_cli._replay import DivergenceRecord, ReplayReport
    from eve_cli.runtime import Runtime


class Replayed(TypedDict):
    """A session's line of the report (``--json``: ``sessions``)."""

    session: str
    turns: int
    divergences: list[DivergenceRecord]
    error: NotRequired[str]  # why it could not be replayed (--all goes on)


def replay(
    session: Annotated[
        str | None,
        typer.Argument(metavar="[SESSION|CASSETTE]", help="Session id, or a cassette file."),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every session in the store.")] = False,
    agent: Annotated[
        Path | None,
        typer.Option(
            "--agent", metavar="DIR", help="The agent folder to check (default: the session's own)."
        ),
    ] = None,
    live_tools: Annotated[
        str | None,
        typer.Option(
            "--live-tools",
            metavar="NAME,...",
            help="Run these (pure) tools for real and compare their results.",
        ),
    ] = None,
    live_model: Annotated[
        bool,
        typer.Option(
            "--live-model",
            help="Ask the live model instead of the recorded "
            "answers; report where its tool calls depart from the recording.",
        ),
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Write the report as JSON.")] = False,
    data: DataOption = None,
    world: WorldOption = None,
) -> None:
    """Replay recorded sessions against the current code; exit 4 if anything diverged."""
    if bool(session) == all_:
        raise CliError("give a SESSION id (or a cassette file) or --all (see: eve inspect)", 2)
    if agent is not None and not agent.is_dir():
        raise CliError(f"agent folder {agent} does not exist", 2)
    tools = [t.strip() for t in (live_tools or "").split(",") if t.strip()]
    reports: list[Replayed] = []
    for sid, tape, folder in _tapes(session, all_, data, world, agent):
        try:
            reports.append(_replay_one(sid, tape, folder, tools, live_model))
        except CliError as exc:
            if not all_:
                raise
            reports.append({"session": sid, "turns": 0, "divergences": [], "error": exc.message})
    _print(reports, json_)
    if any(r["divergences"] for r in reports):
        raise typer.Exit(EXIT_DIVERGED)
    if any("error" in r for r in reports):  # every session reported first (--all)
        raise typer.Exit(1)


def _replay_one(
    sid: str, tape: Cassette, folder: Path | None, tools: list[str], live_model: bool
) -> Replayed:
    """One session's report; a CliError when it cannot be replayed."""
    import asyncio

    model = (tape.get("model") or None) if live_model else None
    if live_model and model is None:
        raise CliError(f"{sid}: the recording names no model to ask (use -m in chat)", 2)
    try:
        found = asyncio.run(_play(tape, folder, tools, model))
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except user_errors() as exc:
        raise CliError(f"{sid}: {user_message(exc)}") from None
    return _entry(sid, tape, found)


def _cassette_agent(name: str, tape: Cassette) -> Path | None:
    """The folder to replay a cassette against without --agent: `./agent` (or the built-in
    agent) if it is the agent the cassette was recorded with; said on stderr either way."""
    from eve_cli._loader import DEFAULT_AGENT_DIR, AgentLoadError, load_agent, resolve_agent_dir

    directory = resolve_agent_dir(None)
    where = "the built-in agent" if directory == DEFAULT_AGENT_DIR else str(directory)
    try:
        serving = load_agent(directory).name
    except AgentLoadError as exc:
        raise CliError(str(exc)) from None
    recorded = tape.get("agent")
    if recorded and recorded != serving:
        raise CliError(
            f"{name} was recorded with agent {recorded!r}, but {where} is agent {serving!r}; "
            f"name the agent's folder: eve replay {name} --agent DIR",
            2,
        )
    typer.echo(f"replaying {name} against agent {serving!r} ({where})", err=True)
    return None if directory == DEFAULT_AGENT_DIR else directory


async def _play(
    tape: Cassette, agent: Path | None, tools: list[str], model: str | None
) -> ReplayReport:
    from eve_cli._replay import play

    return await play(tape, agent, live_tools=tools, live_model=model)


def _tapes(
    session: str | None, all_: bool, data: Path | None, world: str | None, agent: Path | None
) -> list[tuple[str, Cassette, Path | None]]:
    """(name, cassette, the agent folder to replay it on) of each session to replay."""
    from eve_cli._cassette import CassetteError, load

    if session and ("/" in session or session.endswith(".json") or os.path.isfile(session)):
        try:
            tape = load(session)
        except CassetteError as exc:
            raise CliError(str(exc)) from None
        # Without --agent: the agent the cassette names, or refused (never another agent).
        return [(session, tape, agent or _cassette_agent(session, tape))]
    where = choose_world(data, world)
    with open_reader(where) as reader:
        ids = [session] if session else _recorded_sessions(reader)
        return [
            (sid, tape, agent or folder)
            for sid, tape, folder in (_from_store(reader, sid) for sid in ids)
        ]


def _recorded_sessions(reader: Runtime) -> list[str]:
    return sorted(str(r["id"]) for r in reader.sessions() if r.get("turns"))


def _from_store(reader: Runtime, sid: str) -> tuple[str, Cassette, Path | None]:
    from eve_cli._cassette import cassette

    view = reader.session(sid)
    folder = view.get("agentDir")
    model = reader.stored_model(sid)
    if model is None:  # the agent's own, as its folder says now
        try:
            model = reader.executor.agent_for(folder).model
        except Exception:  # a broken folder: the replay reports it with file and line
            model = None
    tape = cassette(sid, reader.events(sid), agent=view.get("agent"), model=model)
    return sid, tape, Path(folder) if folder else None


def _entry(sid: str, tape: Cassette, found: ReplayReport) -> Replayed:
    return {
        "session": sid,
        "turns": len(tape.get("turns") or []),
        "divergences": [d.as_dict() for d in found.divergences],
    }


def _print(reports: list[Replayed], json_: bool) -> None:
    if json_:
        diverged = any(r["divergences"] for r in reports)
        typer.echo(json.dumps({"diverged": diverged, "sessions": reports}))
        return
    for report in reports:
        if "error" in report:
            typer.echo(f"{report['session']}: not replayed: {report['error']}")
            continue
        if not report["divergences"]:
            typer.echo(f"{report['session']}: no divergence ({report['turns']} turn(s) replayed)")
            continue
        typer.echo(f"{report['session']}: {len(report['divergences'])} divergence(s)")
        for d in report["divergences"]:
            typer.echo(f"  [{d['kind']}] {d['message']}")


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
