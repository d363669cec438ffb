"""One `eve eval` from start to report: resume or begin the run, run what is left, build the
report; and ``--replay`` of the last run's sessions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eve_cli.evals._case import Case
from eve_cli.evals._report import Report, RunInfo, build_report
from eve_cli.evals._runner import EvalOptions, OnResult, ResultEntry, run_cases
from eve_cli.evals._state import EvalDir, RunRecord, Selection, run_key

if TYPE_CHECKING:
    from eve_cli.runtime import Runtime


def begin_run(
    eval_dir: EvalDir,
    cases: Sequence[Case],
    options: EvalOptions,
    world: str,
    *,
    throwaway: bool,
    selection: Selection,
) -> RunRecord:
    """The run to do: the unfinished one of the same cases and options, or a new one."""
    key = run_key(
        cases,
        {
            "repeat": options.repeat,
            "model": options.model,
            "judge": options.judge_model,
            "world": world,
            **selection,
        },
    )
    return eval_dir.begin(key, throwaway_world=throwaway)


async def execute_eval(
    rt: Runtime,
    cases: Sequence[Case],
    options: EvalOptions,
    eval_dir: EvalDir,
    record: RunRecord,
    info: RunInfo,
    *,
    on_result: OnResult | None = None,
    default_threshold: float = 1.0,
) -> Report:
    """Run what is left of ``record`` and return the report (kept as the last one)."""
    results = await run_cases(
        rt, cases, options, record.run_id, record.done, eval_dir.record, on_result
    )
    report = build_report(
        cases,
        results,
        {
            "run": record.run_id,
            "resumed": record.resumed,
            "replay": False,
            "agent": rt.agent.name,
            "agentDir": str(rt.agent_dir),
            "repeat": options.repeat,
            "model": options.model,
            "judgeModel": options.judge_model,
            **info,
        },
        default_threshold,
    )
    eval_dir.finish(record, report)
    return report


class NothingToReplay(ValueError):
    """No recorded run has the cases asked for (one line)."""


async def execute_replay(
    reader: Runtime,
    cases: Sequence[Case],
    last: Report,
    agent_dir: Path,
    *,
    on_result: OnResult | None = None,
    default_threshold: float = 1.0,
) -> Report:
    """Replay each recorded repetition of ``cases`` in the report ``last``."""
    from eve_cli.evals._replaying import replay_result

    recorded = {str(row["name"]): row for row in last.get("cases") or []}
    missing = [c.name for c in cases if c.name not in recorded]
    if missing:
        raise NothingToReplay(
            f"the last run has no recording of {', '.join(missing)}: run eve eval first"
        )
    results: dict[tuple[str, int], ResultEntry] = {}
    for case in cases:
        for entry in recorded[case.name].get("results") or []:
            result = await replay_result(reader, case, entry, agent_dir)
            results[(case.name, int(entry.get("repeat", 0)))] = result
            if on_result is not None:
                on_result(case, result)
    info: RunInfo = {
        "run": last.get("run"),
        "replay": True,
        "agent": last.get("agent"),
        "agentDir": str(agent_dir),
        "world": last.get("world"),
        "repeat": last.get("repeat"),
        "model": last.get("model"),
    }
    return build_report(cases, results, info, default_threshold)
