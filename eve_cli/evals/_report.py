"""An eval run's report: the JSON report (what ``--baseline`` reads back), and JUnit XML."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Required, TypedDict
from xml.etree import ElementTree as ET

from eve_cli.evals._case import Case
from eve_cli.evals._runner import ResultEntry

if TYPE_CHECKING:
    from eve_cli.evals._compare import Comparison

REPORT_VERSION = 1


class CaseRow(TypedDict):
    """A case's line of the report: its pass rate over its repetitions and their means."""

    name: str
    file: str
    line: int
    tags: list[str]
    threshold: float
    repetitions: int
    passed: int
    passRate: float
    ok: bool
    steps: float | None
    tokens: float | None
    cost: float | None
    seconds: float | None
    results: list[ResultEntry]


class Summary(TypedDict):
    """The totals of a report's case rows."""

    cases: int
    ok: int
    belowThreshold: list[str]
    flaky: list[str]
    repetitions: int
    passed: int
    passRate: float
    tokens: float | None
    cost: float | None
    seconds: float | None


class RunInfo(TypedDict, total=False):
    """What a report says of its run (as far as it is known)."""

    run: str | None
    resumed: bool
    replay: bool
    agent: str | None
    agentDir: str
    world: str | None
    repeat: int | None
    model: str | None
    judgeModel: str | None


class Report(RunInfo, total=False):
    """The JSON report (what ``--baseline`` reads back)."""

    version: Required[int]
    finishedAt: Required[float]
    cases: Required[list[CaseRow]]
    summary: Required[Summary]


class ComparedReport(Report, total=False):
    """A report with its comparison to a baseline (``--baseline``)."""

    baseline: Required[Comparison]


def _mean(values: Sequence[float | int | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return round(statistics.fmean(known), 6) if known else None


def case_summary(
    case: Case, results: Sequence[ResultEntry], default_threshold: float = 1.0
) -> CaseRow:
    """A case's line of the report: its pass rate over its repetitions and their means."""
    passed = sum(1 for r in results if r.get("passed"))
    rate = passed / len(results) if results else 0.0
    threshold = default_threshold if case.threshold is None else case.threshold
    return {
        "name": case.name,
        "file": str(case.file),
        "line": case.line,
        "tags": list(case.tags),
        "threshold": threshold,
        "repetitions": len(results),
        "passed": passed,
        "passRate": round(rate, 4),
        "ok": bool(results) and rate >= threshold - 1e-9,
        "steps": _mean([r.get("steps") for r in results]),
        "tokens": _mean([r.get("tokens") for r in results]),
        "cost": _mean([r.get("cost") for r in results]),
        "seconds": _mean([r.get("seconds") for r in results]),
        "results": sorted(results, key=lambda r: int(r.get("repeat", 0))),
    }


def build_report(
    cases: Sequence[Case],
    results: Mapping[tuple[str, int], ResultEntry],
    info: RunInfo,
    default_threshold: float = 1.0,
) -> Report:
    """The whole report; ``info``: the run's id, agent, world, model, repeat, ..."""
    rows = []
    for case in cases:
        mine = [r for (name, _), r in results.items() if name == case.name]
        rows.append(case_summary(case, mine, default_threshold))
    return {
        "version": REPORT_VERSION,
        **info,
        "finishedAt": time.time(),
        "cases": rows,
        "summary": _summary(rows),
    }


def _summary(rows: Sequence[CaseRow]) -> Summary:
    """The totals of a report's case rows."""
    runs = [r for row in rows for r in row["results"]]
    passed = sum(1 for r in runs if r.get("passed"))
    return {
        "cases": len(rows),
        "ok": sum(1 for r in rows if r["ok"]),
        "belowThreshold": [r["name"] for r in rows if not r["ok"]],
        "flaky": [r["name"] for r in rows if 0 < r["passed"] < r["repetitions"]],
        "repetitions": len(runs),
        "passed": passed,
        "passRate": round(passed / len(runs), 4) if runs else 0.0,
        "tokens": _mean([r.get("tokens") for r in runs]),
        "cost": _mean([r.get("cost") for r in runs]),
        "seconds": _mean([r.get("seconds") for r in runs]),
    }


def json_bytes(report: Report) -> bytes:
    """The JSON report as written by ``--json`` (what ``--baseline`` reads back)."""
    import json

    return (json.dumps(report, indent=1, default=str, ensure_ascii=False) + "\n").encode()


def junit_xml(report: Report) -> bytes:
    """The report as JUnit XML: one testsuite, one testcase per case (a case below its
    threshold is a failure; each failing repetition is listed in it)."""
    rows = report.get("cases") or []
    failed = [r for r in rows if not r.get("ok")]
    seconds = sum(float(r.get("seconds") or 0) * int(r.get("repetitions") or 0) for r in rows)
    attrs = {
        "name": "eve eval",
        "tests": str(len(rows)),
        "failures": str(len(failed)),
        "errors": "0",
        "skipped": "0",
        "time": f"{seconds:.3f}",
    }
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", {**attrs, "timestamp": _timestamp(report)})
    for row in rows:
        suite.append(_testcase(row))
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=False)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + body


def _timestamp(report: Report) -> str:
    at = float(report.get("finishedAt") or time.time())
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))


def _testcase(row: CaseRow) -> ET.Element:
    from pathlib import Path

    runs = int(row.get("repetitions") or 0)
    element = ET.Element(
        "testcase",
        {
            "classname": f"evals.{Path(str(row.get('file'))).stem}",
            "name": str(row["name"]),
            "file": str(row.get("file")),
            "line": str(row.get("line")),
            "time": f"{float(row.get('seconds') or 0) * runs:.3f}",
        },
    )
    sessions = [str(r.get("session")) for r in row.get("results") or []]
    if not row.get("ok"):
        message = (
            f"pass rate {row.get('passed')}/{runs} below the threshold "
            f"{float(row.get('threshold') or 0):g}"
        )
        failure = ET.SubElement(element, "failure", {"message": message, "type": "EvalFailure"})
        failure.text = "\n".join(_failure_lines(row))
    out = ET.SubElement(element, "system-out")
    out.text = "sessions: " + " ".join(sessions)
    return element


def _failure_lines(row: CaseRow) -> list[str]:
    lines = []
    for result in row.get("results") or []:
        if result.get("passed"):
            continue
        lines.append(f"run {int(result.get('repeat') or 0) + 1} (session {result.get('session')}):")
        lines += [f"  {f}" for f in result.get("failures") or []]
        lines += [
            f"  [{d.get('kind')}] {d.get('message')}" for d in result.get("divergences") or []
        ]
    return lines
