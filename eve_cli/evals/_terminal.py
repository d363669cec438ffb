"""The terminal reporter: live progress (a bar on a terminal, a line per finished run
elsewhere), the summary table, each failing case with the commands that open its sessions,
and the comparison with a baseline."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from eve_cli.evals._case import Case

_MARK = {True: "✓", False: "✗"}


class Progress:
    """Shows each finished repetition as it comes (``total``: how many this run will run)."""

    def __init__(self, total: int, done: int = 0, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total, self.done = total, done
        self._bar: Any = None
        self._task: Any = None
        if self.stream.isatty() and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("eval"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                console=Console(file=self.stream),
                transient=True,
            )
            self._task = self._bar.add_task("", total=total, completed=done)
            self._bar.start()

    def __call__(self, case: Case, result: Mapping[str, Any]) -> None:
        self.done += 1
        line = (
            f"{_MARK[bool(result.get('passed'))]} {case.name} "
            f"[{int(result.get('repeat', 0)) + 1}] {float(result.get('seconds') or 0):.2f}s"
        )
        if not result.get("passed") and result.get("failures"):
            line += f": {result['failures'][0]}"
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
            self._bar.update(self._task, completed=self.done, description=case.name)
        else:
            self.stream.write(f"[{self.done}/{self.total}] {line}\n")
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{float(value):.{digits}f}"


def show(report: Mapping[str, Any], out: TextIO) -> None:
    """The summary table, the failing cases and the comparison with a baseline, if any."""
    summary_table(report, out)
    failures(report, str(report.get("world")), out)
    if report.get("baseline"):
        comparison(report["baseline"], out)
    out.flush()


def summary_table(report: Mapping[str, Any], out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=None, show_edge=False, pad_edge=False)
    for column in ("case", "pass", "rate", "need", "steps", "tokens", "cost", "s"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for row in report.get("cases") or []:
        style = "" if row.get("ok") else "red"
        table.add_row(
            row["name"],
            f"{row['passed']}/{row['repetitions']}",
            f"{row['passRate']:.0%}",
            f"{float(row['threshold']):.0%}",
            _num(row.get("steps"), 1),
            _num(row.get("tokens")),
            _num(row.get("cost"), 4),
            _num(row.get("seconds"), 2),
            style=style,
        )
    Console(file=out, highlight=False).print(table)
    s = report.get("summary") or {}
    out.write(
        f"{s.get('ok')}/{s.get('cases')} cases at their threshold; {s.get('passed')}/"
        f"{s.get('repetitions')} runs passed ({float(s.get('passRate') or 0):.0%})\n"
    )
    if s.get("flaky"):
        out.write(f"flaky (passed some runs, not all): {', '.join(s['flaky'])}\n")


def failures(report: Mapping[str, Any], where: str, out: TextIO) -> None:
    """Each case below its threshold, why each of its runs failed, and how to open them."""
    for row in report.get("cases") or []:
        if row.get("ok"):
            continue
        out.write(
            f"\nFAILED {row['name']} ({row['file']}:{row['line']}): {row['passed']}/"
            f"{row['repetitions']} passed, {float(row['threshold']):.0%} needed\n"
        )
        for result in row.get("results") or []:
            if result.get("passed"):
                continue
            sid = result.get("session")
            out.write(f"  run {int(result.get('repeat', 0)) + 1}, session {sid}:\n")
            for line in result.get("failures") or []:
                out.write(f"    - {line}\n")
            for d in result.get("divergences") or []:
                out.write(f"    - [{d.get('kind')}] {d.get('message')}\n")
            out.write(
                f"    open:   eve inspect {sid} --world {where}\n"
                f"            eve log {sid} --world {where}\n"
                f"            eve start --world {where}, then http://127.0.0.1:8000/#/s/{sid}\n"
                f"    export: eve export {sid} --world {where} -o {row['name']}.json\n"
            )


def comparison(found: Mapping[str, Any], out: TextIO) -> None:
    """What improved and what regressed against the baseline."""
    out.write("\nagainst the baseline:\n")
    for case in found.get("cases") or []:
        if case["status"] == "same":
            continue
        detail = ""
        for name, m in (case.get("measures") or {}).items():
            if m["change"] != "same":
                detail += f" {name} {_num(m['baseline'], 3)} -> {_num(m['now'], 3)};"
        out.write(f"  {case['status']:<9} {case['name']}{detail.rstrip(';')}\n")
    for name, m in (found.get("overall") or {}).items():
        out.write(
            f"  overall {name}: {_num(m['baseline'], 3)} -> {_num(m['now'], 3)} ({m['change']})\n"
        )
