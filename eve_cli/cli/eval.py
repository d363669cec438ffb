"""`eve eval [CASE...]`: run the agent folder's eval cases as sessions and report (SPEC §20).

Exit 0: every case reached its threshold; 1: some case fell below it; 2: bad options or a
mistake in a case file (one ``file:line: what`` line each)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from eve_cli.cli._context import Where, choose_world
from eve_cli.cli._errors import EXIT_USAGE, CliError

if TYPE_CHECKING:
    from eve_cli._loader import AgentDefinition
    from eve_cli.evals import Case, EvalOptions
    from eve_cli.evals._report import ComparedReport, Report
    from eve_cli.evals._state import EvalDir, Selection

EXIT_BELOW = 1
EVAL_DIR = Path(".eve-evals")


def eval_(
    names: Annotated[
        list[str] | None, typer.Argument(metavar="[CASE...]", help="Cases to run (names or globs).")
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", "-t", metavar="TAG", help="Cases with this tag.")
    ] = None,
    agent: Annotated[
        Path | None, typer.Option("--agent", metavar="DIR", help="Agent folder (default ./agent).")
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", metavar="N", help="Sessions run at once.")
    ] = 1,
    repeat: Annotated[
        int, typer.Option("--repeat", "-n", metavar="N", help="Runs of each case.")
    ] = 1,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", metavar="MODEL", help="Model for every case's sessions."),
    ] = None,
    judge_model: Annotated[
        str | None,
        typer.Option(
            "--judge-model",
            metavar="MODEL",
            help="Judge for cases naming none (or EVE_JUDGE_MODEL).",
        ),
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold", metavar="RATE", help="Pass rate a case needs unless it sets one."
        ),
    ] = 1.0,
    json_out: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="Write the JSON report.")
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", metavar="FILE", help="Write JUnit XML.")
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option("--baseline", metavar="FILE", help="Compare with an earlier JSON report."),
    ] = None,
    replay: Annotated[
        bool, typer.Option("--replay", help="Replay the last run's sessions against this code.")
    ] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the cases and exit.")] = False,
    world: Annotated[
        str | None,
        typer.Option(
            "--world",
            metavar="URL|DIR",
            help="Keep the sessions in this world (default: a throwaway .eve-evals/world).",
        ),
    ] = None,
) -> None:
    """Run the eval cases of the agent folder (evals/*.yaml, evals/*.py) as sessions."""
    _check_numbers(jobs, repeat, threshold)
    from eve_cli.evals import EvalOptions

    options = EvalOptions(jobs=jobs, repeat=repeat, model=model, judge_model=judge_model)
    for m in (model, judge_model):
        _check_model(m)
    base = _baseline(baseline)
    definition = _agent(agent)
    cases = _cases(definition, names or [], tag or [])
    if list_:
        for c in cases:
            typer.echo(f"{c.name}\t{c.where}\t{','.join(c.tags)}")
        return
    from eve_cli.evals._state import EvalBusy, EvalDir

    eval_dir = EvalDir(EVAL_DIR)
    try:
        with eval_dir.held():
            if replay:
                report = _replay(eval_dir, definition, cases, world, threshold)
            else:
                report = _run(eval_dir, definition, cases, options, world, threshold,
                              names or [], tag or [])  # fmt: skip
    except EvalBusy as exc:
        raise CliError(str(exc)) from None
    _output(report, json_out, junit, base)
    if any(not row["ok"] for row in report["cases"]):
        raise typer.Exit(EXIT_BELOW)


def _check_numbers(jobs: int, repeat: int, threshold: float) -> None:
    if jobs < 1:
        raise CliError("--jobs must be 1 or more", EXIT_USAGE)
    if repeat < 1:
        raise CliError("--repeat must be 1 or more", EXIT_USAGE)
    if not 0 <= threshold <= 1:
        raise CliError("--threshold is a pass rate from 0 to 1", EXIT_USAGE)


def _check_model(model: str | None) -> None:
    from eve_cli._loader import check_model_string

    if model is not None and (problem := check_model_string(model)):
        raise CliError(problem, EXIT_USAGE)


def _baseline(path: Path | None) -> Report | None:
    if path is None:
        return None
    from eve_cli.evals._compare import BaselineError, load_baseline

    try:
        return load_baseline(path)
    except BaselineError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _agent(agent: Path | None) -> AgentDefinition:
    from eve_cli._loader import DEFAULT_AGENT_DIR, AgentLoadError, load_agent, resolve_agent_dir

    if agent is not None and not agent.is_dir():
        raise CliError(f"agent folder {agent} does not exist; create one with: eve init", 2)
    directory = resolve_agent_dir(agent)
    if directory == DEFAULT_AGENT_DIR:
        raise CliError(
            "no agent folder (./agent or --agent DIR) to evaluate; eve init "
            "makes one with an example case",
            EXIT_USAGE,
        )
    try:
        return load_agent(directory)
    except AgentLoadError as exc:
        raise CliError(str(exc)) from None


def _cases(agent: AgentDefinition, names: list[str], tags: list[str]) -> list[Case]:
    from eve_cli.evals import CaseErrors, load_cases, select

    try:
        cases = load_cases(agent.directory, agent)
    except CaseErrors as exc:
        for error in exc.errors[:-1]:
            sys.stderr.write(f"eve: error: {error}\n")
        raise CliError(str(exc.errors[-1]), EXIT_USAGE) from None
    if not cases:
        raise CliError(
            f"no cases in {agent.directory / 'evals'} (evals/*.yaml or evals/*.py; "
            "see the README's Evals section)",
            EXIT_USAGE,
        )
    try:
        chosen = select(cases, names, tags)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if not chosen:
        raise CliError(f"no case has the tag(s) {', '.join(tags)}", EXIT_USAGE)
    return chosen


def _where(world: str | None, eval_dir: EvalDir) -> tuple[Where, bool]:
    """The world the sessions go to (this command's --world, else eve's global --world or
    --data), and whether it is the throwaway one."""
    from eve_cli.cli._context import state

    given = state().world or (str(state().data) if state().data else None)
    world = world or given
    if world:
        return choose_world(None, world, create=True), False
    return Where(eval_dir.world), True


def _run(
    eval_dir: EvalDir,
    agent: AgentDefinition,
    cases: list[Case],
    options: EvalOptions,
    world: str | None,
    threshold: float,
    names: list[str],
    tags: list[str],
) -> Report:
    from eve_cli.cli._runtime import open_runtime
    from eve_cli.evals._evalrun import begin_run, execute_eval
    from eve_cli.evals._terminal import Progress

    where, throwaway = _where(world, eval_dir)
    selection: Selection = {
        "names": sorted(names),
        "tags": sorted(tags),
        "agent": str(agent.directory),
        "threshold": threshold,
    }
    record = begin_run(
        eval_dir, cases, options, str(where), throwaway=throwaway, selection=selection
    )
    total = len(cases) * options.repeat
    if record.resumed:
        sys.stderr.write(
            f"eve eval: resuming run {record.run_id} ({len(record.done)}/{total} "
            "runs already done)\n"
        )
    else:
        sys.stderr.write(
            f"eve eval: run {record.run_id}: {len(cases)} case(s) x {options.repeat}, "
            f"{options.jobs} at a time, sessions in {where}\n"
        )
    progress = Progress(total, len(record.done))
    try:
        with open_runtime(where, agent.directory, None) as (rt, loop):
            return loop.run_until_complete(
                execute_eval(
                    rt,
                    cases,
                    options,
                    eval_dir,
                    record,
                    {"world": str(where)},
                    on_result=progress,
                    default_threshold=threshold,
                )
            )
    finally:
        progress.close()


def _replay(
    eval_dir: EvalDir,
    agent: AgentDefinition,
    cases: list[Case],
    world: str | None,
    threshold: float,
) -> Report:
    import asyncio

    from eve_cli.cli._runtime import open_reader
    from eve_cli.evals._evalrun import NothingToReplay, execute_replay
    from eve_cli.evals._terminal import Progress

    last = eval_dir.last_report()
    if last is None:
        raise CliError(f"no finished run in {eval_dir.folder} to replay: run eve eval first")
    recorded = str(last.get("world") or "")
    if world is None and "://" in recorded:
        raise CliError(f"the last run's world is {recorded}: give it again with --world", 2)
    where = choose_world(None, world or recorded)
    progress = Progress(
        sum(
            len(r.get("results") or [])
            for r in last.get("cases") or []
            if r.get("name") in {c.name for c in cases}
        )
    )
    try:
        with open_reader(where) as reader:
            return asyncio.run(
                execute_replay(
                    reader,
                    cases,
                    last,
                    agent.directory,
                    on_result=progress,
                    default_threshold=threshold,
                )
            )
    except NothingToReplay as exc:
        raise CliError(str(exc)) from None
    finally:
        progress.close()


def _output(report: Report, json_out: Path | None, junit: Path | None, base: Report | None) -> None:
    from eve_cli.evals._report import json_bytes, junit_xml
    from eve_cli.evals._terminal import show

    if base is not None:
        from eve_cli.evals._compare import compare

        compared: ComparedReport = {**report, "baseline": compare(report, base)}
        report = compared
    show(report, sys.stdout)
    for path, make in ((json_out, json_bytes), (junit, junit_xml)):
        if path is None:
            continue
        try:
            path.write_bytes(make(report))
        except OSError as exc:
            raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_)
