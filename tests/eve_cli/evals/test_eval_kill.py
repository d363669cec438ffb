"""An eval run killed with SIGKILL midway is finished by the next `eve eval`: the cases done
are kept, the ones in flight carry on in the sessions they had, and no case counts twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.eve_cli.evals.eval_support import eval_agent, report_of
from tests.eve_cli.rt_support import call, reply, tool_file

SLOW = tool_file(
    """
    import time
    from pathlib import Path

    @tool
    def slow(case: str) -> str:
        \"\"\"Takes a while.\"\"\"
        with open(Path.cwd() / "calls.log", "a") as log:
            log.write(case + "\\n")
        time.sleep(0.4)
        return f"done {case}"
    """
)
CASES = 6


def _eval(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "eval", "-j", "2", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_run_killed_midway_is_finished_by_the_next_and_counts_each_case_once(
    isolated: Path,
) -> None:
    cases = "cases:\n" + "".join(
        f"  - {{name: c{i}, model: 'scripted:s{i}.json', messages: ['go {i}'], "
        f"expect: {{contains: 'finished {i}'}}}}\n"
        for i in range(CASES)
    )
    scripts = {
        f"s{i}": [reply("", call("slow", case=f"c{i}")), reply(f"finished {i}")]
        for i in range(CASES)
    }
    eval_agent(isolated, {"k.yaml": cases}, scripts, tools=SLOW)
    results = isolated / ".eve-evals" / "results.jsonl"
    first = _eval()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = results.read_text().count("\n") if results.exists() else 0
        if done >= 2 or first.poll() is not None:
            break
        time.sleep(0.02)
    assert first.poll() is None, first.communicate()
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    kept = [json.loads(line) for line in results.read_text().splitlines()]
    assert 2 <= len(kept) < CASES

    second = _eval("--json", "r.json")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, out + err
    assert f"resuming run {kept[0]['run']} ({len(kept)}/{CASES} runs already done)" in err
    report = report_of(isolated / "r.json")
    assert report["resumed"] is True and report["run"] == kept[0]["run"]
    assert [c["repetitions"] for c in report["cases"]] == [1] * CASES
    assert report["summary"] == {**report["summary"], "repetitions": CASES, "passed": CASES}
    # The results kept from the killed run are the report's (not run again) ...
    for entry in kept:
        (again,) = next(c for c in report["cases"] if c["name"] == entry["case"])["results"]
        assert again["session"] == entry["session"]
    # ... the second run reported only the rest ...
    assert err.count("✓") == CASES - len(kept)
    # ... and the world holds one session per case: none was made twice.
    listed = subprocess.run(
        [sys.executable, "-m", "eve_cli", "inspect", "--json", "--world", ".eve-evals/world"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    sessions = json.loads(listed.stdout)
    rows = sessions if isinstance(sessions, list) else sessions["sessions"]
    assert len(rows) == CASES
    calls = (isolated / "calls.log").read_text().split()
    assert sorted(set(calls)) == [f"c{i}" for i in range(CASES)]
