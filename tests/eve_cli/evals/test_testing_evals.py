"""`eve_cli.testing` for evals: a case run from a user's own tests, the same expectations on
any run, and the `eval_case` fixture in a real pytest run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eve_cli.evals import CaseErrors, CaseFileError
from eve_cli.testing import expect, run_eval_case
from tests.eve_cli.evals.eval_support import eval_agent
from tests.eve_cli.rt_support import reply

CASES = """
    cases:
      - name: stubbed
        model: scripted:write.json
        messages: ["write it"]
        stubs: [{tool: write_file, result: "pretend"}]
        expect: {contains: "done", tools_called: [write_file]}
      - name: failing
        model: scripted:write.json
        messages: ["write it"]
        expect: {contains: "nope"}
"""
WRITE = [{"text": "", "tool_calls": [{"name": "write_file",
                                      "arguments": {"name": "out.txt", "text": "x"}}]},
         reply("done")]  # fmt: skip


def test_a_case_runs_from_a_test_with_its_stubs(isolated: Path) -> None:
    agent = eval_agent(isolated, {"c.yaml": CASES}, {"write": WRITE})
    run = run_eval_case("stubbed", agent)
    assert run.passed and run.failures == [] and run.reply == "done"
    assert [(c.name, c.output) for c in run.tool_calls] == [("write_file", "pretend")]
    assert run.view is not None and run.view["status"] == "waiting"
    assert not (isolated / "out.txt").exists()
    failing = run_eval_case("failing", agent)
    assert failing.failures == ["reply does not contain 'nope': \"done\""]
    with pytest.raises(ValueError, match="no eval case 'absent'"):
        run_eval_case("absent", agent)


def test_expectations_check_any_run(isolated: Path) -> None:
    agent = eval_agent(isolated, {"c.yaml": CASES}, {"write": WRITE})
    run = run_eval_case("failing", agent)
    assert expect(run, contains="done", tools_called=["write_file"], max_steps=2) == []

    def wrote_out(r: object) -> bool:
        return False

    assert expect(run, tools_not_called="write_file", check=wrote_out) == [
        "tool 'write_file' was called (1 time(s))",
        "check wrote_out returned False",
    ]
    with pytest.raises(CaseFileError, match="unknown expectation key 'contain'"):
        expect(run, contain="done")


def test_the_eval_case_fixture_in_a_users_suite(isolated: Path) -> None:
    eval_agent(isolated, {"c.yaml": CASES}, {"write": WRITE})
    (isolated / "conftest.py").write_text('pytest_plugins = ["eve_cli.testing"]\n')
    (isolated / "test_agent.py").write_text(
        "def test_stubbed(eval_case):\n"
        "    run = eval_case('stubbed')\n"
        "    assert run.passed, run.failures\n"
        "    assert run.view['status'] == 'waiting'\n"
        "\n"
        "def test_failing(eval_case):\n"
        "    assert not eval_case('failing').passed\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_agent.py"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_a_broken_case_file_stops_a_test_with_file_and_line(isolated: Path) -> None:
    agent = eval_agent(isolated, {"c.yaml": "cases:\n  - name: x\n"})
    with pytest.raises(CaseErrors, match=r"c\.yaml:2: a case needs 'messages'"):
        run_eval_case("x", agent)
