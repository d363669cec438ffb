"""Evals (SPEC §20): cases in an agent folder's ``evals/`` run as real sessions and checked.

Case files (``_yamlfile``, ``_parse``, ``_load``), what a run did (``_outcome``, read from
its events), expectations (``_expect``) and the LLM judge (``_judge``), tool stubs
(``_stubs``), the runner (``_runner``: one session per case repetition, resumable), the
run's durable record (``_state``), reports (``_report``: JSON and JUnit XML, ``_terminal``),
the comparison with a baseline (``_compare``) and ``--replay`` (``_replaying``), put together
by ``_evalrun`` for `eve eval`. Uses the runtime's public facade (`eve_cli.runtime`) and
`eve replay`'s machinery (`eve_cli._replay`); `world` is not touched directly.

In a Python case file (``evals/*.py``)::

    from eve_cli.evals import case

    def mentions_total(run):
        assert "total" in run.reply

    case(name="sum", messages=["add 2 and 3"], expect={"contains": "5", "check": mentions_total})
"""

from __future__ import annotations

from eve_cli.evals._case import Answer, Case, Expect, Judge, Stub, ToolCallExpected
from eve_cli.evals._load import CaseErrors, case, load_cases, select
from eve_cli.evals._outcome import CaseRun, ToolCallMade
from eve_cli.evals._runner import EvalOptions, run_case
from eve_cli.evals._yamlfile import CaseFileError

__all__ = [
    "Answer",
    "Case",
    "CaseErrors",
    "CaseFileError",
    "CaseRun",
    "EvalOptions",
    "Expect",
    "Judge",
    "Stub",
    "ToolCallExpected",
    "ToolCallMade",
    "case",
    "load_cases",
    "run_case",
    "select",
]
