"""A report against a baseline report (``--baseline FILE``): what improved and what regressed,
per case and overall, in pass rate, tokens, cost and latency.

A higher pass rate is better; fewer tokens, less cost and fewer seconds are better. A change
of a measure counts only past ``TOLERANCE`` of the baseline's value and ``FLOOR`` (runs vary
a little), a change of pass rate always. A case whose pass rate changed improved or regressed
by it; otherwise by its other measures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    from eve_cli.evals._report import Report

TOLERANCE = 0.10  # a tenth of the baseline's value
FLOOR = {"tokens": 1.0, "cost": 1e-6, "seconds": 0.1}  # and at least this much
MEASURES = ("passRate", "tokens", "cost", "seconds")


class MeasureChange(TypedDict):
    """One measure in the baseline and now, and which way it went."""

    baseline: float | None
    now: float | None
    change: str  # improved | regressed | same


class CaseChange(TypedDict):
    """A case against the baseline: ``new``, ``removed``, or how its measures changed."""

    name: str
    status: str  # new | removed | improved | regressed | same
    measures: NotRequired[dict[str, MeasureChange]]


class Comparison(TypedDict):
    """A report against a baseline report, per case and overall."""

    cases: list[CaseChange]
    overall: dict[str, MeasureChange]
    improved: list[str]
    regressed: list[str]


class BaselineError(ValueError):
    """The baseline file is not an `eve eval` JSON report (one line)."""


def load_baseline(path: Path) -> Report:
    try:
        found: Report = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"--baseline {path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BaselineError(f"--baseline {path}: not JSON: {exc}") from None
    if not isinstance(found, dict) or not isinstance(found.get("cases"), list):
        raise BaselineError(f"--baseline {path}: not a report of eve eval --json")
    return found


def verdict(measure: str, was: Any, now: Any) -> str:
    """``improved``, ``regressed`` or ``same`` for one measure."""
    if not isinstance(was, (int, float)) or not isinstance(now, (int, float)):
        return "same"
    if measure == "passRate":
        return "improved" if now > was + 1e-9 else "regressed" if now < was - 1e-9 else "same"
    margin = max(abs(was) * TOLERANCE, FLOOR.get(measure, 0.0))
    if now < was - margin:
        return "improved"
    if now > was + margin:
        return "regressed"
    return "same"


def _changes(was: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, MeasureChange]:
    out: dict[str, MeasureChange] = {}
    for m in MEASURES:
        out[m] = {
            "baseline": was.get(m),
            "now": now.get(m),
            "change": verdict(m, was.get(m), now.get(m)),
        }
    return out


def _status(changes: Mapping[str, MeasureChange]) -> str:
    rate = changes["passRate"]["change"]
    if rate != "same":
        return str(rate)
    kinds = {c["change"] for c in changes.values()}
    return "regressed" if "regressed" in kinds else "improved" if "improved" in kinds else "same"


def compare(report: Report, baseline: Report) -> Comparison:
    """Per case (``new`` and ``removed`` ones too) and overall."""
    before = {str(c.get("name")): c for c in baseline.get("cases") or []}
    cases: list[CaseChange] = []
    for row in report.get("cases") or []:
        old = before.pop(str(row["name"]), None)
        if old is None:
            cases.append({"name": row["name"], "status": "new"})
            continue
        changes = _changes(old, row)
        cases.append({"name": row["name"], "status": _status(changes), "measures": changes})
    cases += [{"name": name, "status": "removed"} for name in before]
    overall = _changes(baseline.get("summary") or {}, report.get("summary") or {})
    return {
        "cases": cases,
        "overall": overall,
        "improved": [c["name"] for c in cases if c["status"] == "improved"],
        "regressed": [c["name"] for c in cases if c["status"] == "regressed"],
    }
