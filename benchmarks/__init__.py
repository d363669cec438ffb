"""Performance benchmarks (SPEC §11), run with `python -m benchmarks [NAME ...] [--quick] [--json]`.

Each benchmark is a module with `run(quick: bool) -> Iterable[dict]`, registered below by
name and imported only when chosen. A measurement is one JSON line: `name` (prefixed with the
benchmark's name, e.g. `world.step_overhead`), `value`, `unit`, and for comparisons `baseline`
and `ratio`. Default sizes are SPEC §11's; `--quick` runs smoke-test sizes.
"""

from __future__ import annotations

from typing import Any

# name -> module; add a line here to register a benchmark.
BENCHMARKS: dict[str, str] = {
    "world": "benchmarks.world_bench",
    "step_overhead": "benchmarks.step_overhead",
    "storage_growth": "benchmarks.storage_growth",
    "resume_flat": "benchmarks.resume_flat",
    "parked_sessions": "benchmarks.parked_sessions",
    "cli_startup": "benchmarks.cli_startup",
    "server_throughput": "benchmarks.server_throughput",
    "postgres": "benchmarks.postgres_bench",
    "workers": "benchmarks.workers_bench",
    "mcp": "benchmarks.mcp_bench",
    "fork_cost": "benchmarks.fork_cost",
    "dbos": "benchmarks.dbos_bench",
    "timer_wake": "benchmarks.timer_wake",
    "evals": "benchmarks.evals_bench",
    "cache": "benchmarks.cache_bench",
    "auth": "benchmarks.auth_bench",
    "long_turn": "benchmarks.long_turn",
    "session_get": "benchmarks.session_get",
    "late_turn": "benchmarks.late_turn",
}


def measurement(
    name: str,
    value: float,
    unit: str,
    *,
    baseline: float | None = None,
    ratio: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One measurement line; `ratio` defaults to value / baseline when a baseline is given."""
    line: dict[str, Any] = {"name": name, "value": _round(value), "unit": unit}
    if baseline is not None:
        line["baseline"] = _round(baseline)
        line["ratio"] = _round(ratio if ratio is not None else value / baseline if baseline else 0)
    elif ratio is not None:
        line["ratio"] = _round(ratio)
    line.update(extra)
    return line


def _round(x: float) -> float:
    return float(f"{x:.4g}")
