"""What `eve eval` adds to the sessions it runs (SPEC §20): ``CASES`` one-turn cases on the
scripted model (a tool call, then a reply), ``JOBS`` at a time, on a local world on disk.

* ``evals.overhead``: wall time of the harness — loading the case file, the run's record,
  one session per case driven through its messages, the expectations checked on its events,
  each result written, the report built and kept — against ``baseline``: the same sessions
  (create, deliver, drive until they wait) driven directly, ``JOBS`` at a time, on a fresh
  world of their own. The budget is a ratio ≤ 1.3. Median of ``ROUNDS`` alternating rounds.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eve_cli.evals._report import Report

from . import measurement
from ._support import call, scratch, write_agent

CASES, JOBS, ROUNDS = 100, 4, 3
CASE = (
    "  - name: case-{i}\n"
    "    messages: ['do it {i}']\n"
    "    expect: {{contains: 'done', tools_called: [noop], max_steps: 3}}\n"
)


def _agent(root: Path, cases: int) -> Path:
    script: list[dict[str, Any]] = [
        {"text": "", "tool_calls": [call("noop")]},
        {"text": "done", "tool_calls": []},
    ]
    agent = write_agent(root / "agent", script, context_window=10_000_000)
    (agent / "evals").mkdir()
    body = "".join(CASE.format(i=i) for i in range(cases))
    (agent / "evals" / "many.yaml").write_text("cases:\n" + body)
    return agent


def _direct(agent: Path, data: Path, cases: int) -> float:
    from eve_cli.runtime import Runtime

    rt = Runtime(data_dir=data, agent_dir=agent)

    async def main() -> None:
        gate = asyncio.Semaphore(JOBS)

        async def one(i: int) -> None:
            async with gate:
                sid = await rt.create_session()
                await rt.deliver(sid, f"do it {i}")
                await rt.drive(sid)

        await asyncio.gather(*(one(i) for i in range(cases)))

    began = time.perf_counter()
    try:
        asyncio.run(main())
    finally:
        rt.close()
    return time.perf_counter() - began


def _harness(agent: Path, folder: Path, cases: int) -> tuple[float, Report]:
    from eve_cli._loader import load_agent
    from eve_cli.evals import EvalOptions, load_cases
    from eve_cli.evals._evalrun import begin_run, execute_eval
    from eve_cli.evals._state import EvalDir
    from eve_cli.runtime import Runtime

    began = time.perf_counter()
    definition = load_agent(agent)
    found = load_cases(agent, definition)
    options = EvalOptions(jobs=JOBS)
    eval_dir = EvalDir(folder)
    record = begin_run(eval_dir, found, options, str(eval_dir.world), throwaway=True,
                       selection={})  # fmt: skip
    rt = Runtime(data_dir=eval_dir.world, agent_dir=agent)
    try:
        report = asyncio.run(execute_eval(rt, found, options, eval_dir, record, {}))
    finally:
        rt.close()
    return time.perf_counter() - began, report


def run(quick: bool) -> Iterator[dict[str, Any]]:
    cases = 12 if quick else CASES
    rounds = 1 if quick else ROUNDS
    with scratch("eve-bench-evals-") as root:
        agent = _agent(root, cases)
        direct, harness = [], []
        for n in range(rounds):
            direct.append(_direct(agent, root / f"direct-{n}", cases))
            took, report = _harness(agent, root / f"evals-{n}", cases)
            harness.append(took)
            summary = report["summary"]
            if summary["passed"] != cases:
                raise RuntimeError(f"the eval benchmark's cases failed: {summary}")
    yield measurement(
        "evals.overhead", statistics.median(harness), "s",
        baseline=statistics.median(direct), cases=cases, jobs=JOBS,
    )  # fmt: skip
