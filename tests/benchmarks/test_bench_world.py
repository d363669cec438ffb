"""The world benchmark runs end to end at smoke size and prints well-formed JSON lines."""

from __future__ import annotations

import json
import subprocess
import sys


def test_world_benchmark_quick_prints_one_json_line_per_measurement() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "world", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    names = [line["name"] for line in lines]
    assert names == ["world.step_overhead", "world.files", "world.resume", "world.reopen"]
    for line in lines:
        assert line["value"] > 0 and line["baseline"] > 0 and line["ratio"] > 0
        assert line["unit"] in ("s/step", "files", "s")
    files = lines[1]
    assert files["value"] == files["baseline"]  # files grow with runs, not steps
    assert out.stderr == ""


def test_unknown_benchmark_is_one_clear_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "nope"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "unknown benchmark 'nope'" in out.stderr
