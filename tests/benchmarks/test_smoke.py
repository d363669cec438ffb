"""Every registered benchmark runs at its smoke-test size and prints well-formed measurements.

Figures are not checked here (benchmarks are not timed tests); only that each benchmark runs end
to end and reports what SPEC §11 asks for.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BENCHMARKS
from tests.pg_support import require_server

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

EXPECTED = {
    "step_overhead": {
        "step_overhead.step",
        "step_overhead.reserved",
        "step_overhead.waiting",
        "step_overhead.fsyncs",
        "step_overhead.bytes",
        "step_overhead.unsafe",
    },
    "storage_growth": {
        "storage_growth.bytes",
        "storage_growth.files",
        "storage_growth.vs_raw",
        "storage_growth.per_turn",
    },
    "resume_flat": {"resume_flat.turn", "resume_flat.open", "resume_flat.view"},
    "parked_sessions": {
        "parked_sessions.processes",
        "parked_sessions.list",
        "parked_sessions.wake",
        "parked_sessions.lineage",
    },
    "cli_startup": {
        "cli_startup.version",
        "cli_startup.inspect",
        "cli_startup.chat_print",
        "cli_startup.chat_piped",
        "cli_startup.help",
        "cli_startup.inspect_list",
        "cli_startup.inspect_session",
        "cli_startup.log",
        "cli_startup.schedules",
    },
    "postgres": {
        "postgres.step", "postgres.text", "postgres.sweep", "postgres.bytes_per_turn",
        "postgres.growth", "postgres.late_turn",
    },
    "mcp": {"mcp.step", "mcp.start", "mcp.list", "mcp.call"},
    "workers": {
        "workers.steps_per_s.1",
        "workers.steps_per_s.2",
        "workers.latency_p99.2",
        "workers.takeover_kill",
        "workers.takeover_stop",
    },
    "timer_wake": {"timer_wake.scan", "timer_wake.idle_cpu", "timer_wake.late"},
    "evals": {"evals.overhead"},
    "cache": {"cache.full_price_input", "cache.cost"},
    "long_turn": {"long_turn.step", "long_turn.compactions"},
    "late_turn": {"late_turn.drive", "late_turn.cpu"},
    "session_get": {
        "session_get.local.first",
        "session_get.local",
        "session_get.postgres.first",
        "session_get.postgres",
    },
    "server_throughput": {
        "server_throughput.steps_per_s.1",
        "server_throughput.latency_p50.1",
        "server_throughput.latency_p99.1",
        "server_throughput.scaling",
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_benchmark_quick(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "bench"
    scratch.mkdir()
    monkeypatch.setenv("EVE_BENCH_DIR", str(scratch))
    # The tests' server (outside CI: skipped if away).
    if name in ("postgres", "workers", "session_get"):
        monkeypatch.setenv("EVE_BENCH_POSTGRES", require_server())
    module = importlib.import_module(BENCHMARKS[name])
    lines = list(module.run(True))
    names = {line["name"] for line in lines}
    assert EXPECTED[name] <= names
    for line in lines:
        assert line["name"].startswith(f"{name}.")
        assert isinstance(line["value"], float) and math.isfinite(line["value"])
        assert line["unit"]
        if "baseline" in line:
            assert line["ratio"] == pytest.approx(line["value"] / line["baseline"], rel=1e-2)
        json.dumps(line)
    assert list(scratch.iterdir()) == []  # scratch directories are removed


def test_command_line_json(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "cli_startup", "--quick", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        timeout=60,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["name"] for line in lines][:1] == ["cli_startup.version"]
    assert done.stderr == ""


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    scratch = tmp_path / "not" / "there" / "yet"  # made when missing
    shell = (
        f"EVE_BENCH_DIR={scratch} {sys.executable} -m benchmarks step_overhead --quick --json"
        " | head -1"
    )
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["name"] == "step_overhead.step"
    assert scratch.is_dir() and list(scratch.iterdir()) == []


def test_the_dbos_comparison_runs_or_says_dbos_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(BENCHMARKS["dbos"])
    if importlib.util.find_spec("dbos") is None:  # an optional dependency of this one only
        assert list(module.run(True)) == []
        assert "dbos: not installed (pip install dbos)" in capsys.readouterr().err
        return
    monkeypatch.setenv("EVE_BENCH_POSTGRES", require_server())
    [line] = module.run(True)
    assert line["name"] == "dbos.step" and line["baseline"] > 0
