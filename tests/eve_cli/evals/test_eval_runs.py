"""`eve eval` on the scripted model: passing and failing cases, exit codes, the reports (JSON,
JUnit XML), stubs, answers, every kind of expectation, the baseline and --replay."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from eve_cli.cli.app import app
from tests.eve_cli.evals.eval_support import eval_agent, report_of, row
from tests.eve_cli.rt_support import call, reply

ECHO_THEN_ANSWER = [reply("", call("echo", text="hi")), reply("The answer is 42")]

TWO = """
    tags: [smoke]
    cases:
      - name: good
        model: scripted:echo.json
        messages: ["say hi"]
        expect:
          contains: "42"
          tools_called: [{name: echo, arguments: {text: "h."}}]
      - name: bad
        model: scripted:echo.json
        tags: [slowpoke]
        messages: ["say hi"]
        expect:
          contains: "43"
"""


def eve(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def test_a_failing_case_exits_1_and_the_reports_say_why(isolated: Path) -> None:
    eval_agent(isolated, {"two.yaml": TWO}, {"echo": ECHO_THEN_ANSWER})
    result = eve("eval", "--json", "r.json", "--junit", "r.xml")
    assert result.exit_code == 1, result.output
    report = report_of(isolated / "r.json")
    good, bad = row(report, "good"), row(report, "bad")
    assert (good["ok"], good["passRate"], bad["ok"], bad["passRate"]) == (True, 1.0, False, 0.0)
    (run,) = bad["results"]
    assert run["failures"] == ["reply does not contain '43': \"The answer is 42\""]
    assert report["summary"]["belowThreshold"] == ["bad"]
    sid = run["session"]
    assert f"eve inspect {sid} --world .eve-evals/world" in result.stdout
    assert f"eve export {sid} --world .eve-evals/world -o bad.json" in result.stdout
    assert f"http://127.0.0.1:8000/#/s/{sid}" in result.stdout
    # The failing run is a session that opens like any other.
    log = eve("log", sid, "--world", ".eve-evals/world")
    assert log.exit_code == 0 and "The answer is 42" in log.stdout and "echo" in log.stdout
    _check_junit(isolated / "r.xml", sid)


def _check_junit(path: Path, failing_session: str) -> None:
    """The structure the JUnit schema (Ant's, which CI servers read) asks for."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "2" and root.get("failures") == "1"
    (suite,) = root.findall("testsuite")
    for attribute in ("name", "tests", "failures", "errors", "skipped", "time", "timestamp"):
        assert suite.get(attribute) is not None, attribute
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["good", "bad"]
    for case in cases:
        assert case.get("classname") == "evals.two" and float(case.get("time") or "x") >= 0
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None and failure.get("message") == ("pass rate 0/1 below the threshold 1")
    assert failing_session in (failure.text or "")
    assert failing_session in (cases[1].findtext("system-out") or "")


def test_cases_chosen_by_name_or_tag_and_the_threshold_option(isolated: Path) -> None:
    eval_agent(isolated, {"two.yaml": TWO}, {"echo": ECHO_THEN_ANSWER})
    assert eve("eval", "good").exit_code == 0
    assert eve("eval", "g*", "--json", "r.json").exit_code == 0
    assert [r["name"] for r in report_of(isolated / "r.json")["cases"]] == ["good"]
    assert eve("eval", "--tag", "slowpoke").exit_code == 1
    assert eve("eval", "--threshold", "0").exit_code == 0
    listed = eve("eval", "--list")
    assert listed.exit_code == 0 and listed.stdout.splitlines()[0].startswith("good\t")
    nothing = eve("eval", "nope")
    assert nothing.exit_code == 2 and "no case named 'nope'" in nothing.stderr


STUBS = """
    cases:
      - name: stubbed
        model: scripted:write.json
        messages: ["write it"]
        stubs:
          - tool: write_file
            arguments: {name: "stubbed\\\\.txt"}
            result: "wrote stubbed.txt (stub)"
        expect:
          tools_called: [write_file]
          check: checks.py:stub_answered
      - name: real
        model: scripted:write-real.json
        messages: ["write it"]
"""
CHECKS = """
def stub_answered(run):
    (made,) = run.called("write_file")
    assert made.output == "wrote stubbed.txt (stub)", made.output
"""


def test_a_stubbed_tool_never_runs(isolated: Path) -> None:
    scripts = {
        "write": [
            reply("", {"name": "write_file", "arguments": {"name": "stubbed.txt", "text": "x"}}),
            reply("done"),
        ],
        "write-real": [
            reply("", {"name": "write_file", "arguments": {"name": "real.txt", "text": "x"}}),
            reply("done"),
        ],
    }
    eval_agent(isolated, {"stubs.yaml": STUBS, "checks.py": CHECKS}, scripts)
    result = eve("eval", "-j", "2")
    assert result.exit_code == 0, result.output
    assert not (isolated / "stubbed.txt").exists()
    assert (isolated / "real.txt").read_text() == "x"  # the same tool, not stubbed, writes


ANSWERS = """
    cases:
      - name: approved
        model: scripted:danger.json
        messages: ["go"]
        answers: [{approve: true, tool: danger}]
        expect:
          check: checks.py:doubled
      - name: refused
        model: scripted:danger.json
        messages: ["go"]
        answers: [{approve: false}]
        expect:
          check: checks.py:doubled
      - name: unanswered
        model: scripted:danger.json
        messages: ["go"]
      - name: question
        model: scripted:ask.json
        messages: ["quiz me"]
        answers: [{answer: blue}]
        expect:
          check: checks.py:blue
"""
ANSWER_CHECKS = """
def doubled(run):
    (made,) = run.called("danger")
    assert made.output == "6", made.output

def blue(run):
    (asked,) = run.called("ask_question")
    assert "blue" in str(asked.output), asked.output
"""


def test_approvals_and_questions_are_answered_in_order(isolated: Path) -> None:
    scripts = {
        "danger": [reply("", call("danger", x=3)), reply("done")],
        "ask": [reply("", call("ask_question", question="colour?")), reply("ok")],
    }
    eval_agent(isolated, {"answers.yaml": ANSWERS, "checks.py": ANSWER_CHECKS}, scripts)
    result = eve("eval", "--json", "r.json")
    report = report_of(isolated / "r.json")
    ok = {r["name"]: r["ok"] for r in report["cases"]}
    assert ok == {"approved": True, "refused": False, "unanswered": False, "question": True}
    assert result.exit_code == 1
    (refused,) = row(report, "refused")["results"]
    assert refused["failures"][0].startswith("check checks.py:doubled failed")
    (unanswered,) = row(report, "unanswered")["results"]
    assert unanswered["failures"] == [
        'asked for approval of danger({"x": 3}) with no answer left in the case '
        "(add one to 'answers')"
    ]


BEHAVIOUR = """
    cases:
      - name: all-wrong
        model: scripted:echo.json
        messages: ["say hi"]
        expect:
          equals: "The answer is 43"
          regex: "^\\\\d+$"
          not_contains: "answer"
          json_schema: {type: object}
          tools_called: [{name: echo, arguments: {text: "bye"}}, danger]
          tools_not_called: [echo]
          max_steps: 1
          max_tokens: 10
          max_cost: 1
      - name: exhausted
        model: scripted:short.json
        messages: ["one", "two"]
      - name: exhausted-allowed
        model: scripted:short.json
        messages: ["one", "two"]
        expect: {no_error: false, max_seconds: 60}
"""


def test_behaviour_expectations_each_say_what_they_saw(isolated: Path) -> None:
    scripts = {"echo": ECHO_THEN_ANSWER, "short": [reply("first")]}
    eval_agent(isolated, {"b.yaml": BEHAVIOUR}, scripts)
    eve("eval", "--json", "r.json")
    report = report_of(isolated / "r.json")
    (wrong,) = row(report, "all-wrong")["results"]
    assert wrong["failures"] == [
        "reply contains 'answer': \"The answer is 42\"",
        'reply does not match /^\\d+$/: "The answer is 42"',
        "reply is not 'The answer is 43': \"The answer is 42\"",
        'reply is not JSON: "The answer is 42"',
        'tool \'echo\' was not called with arguments matching {"text": "bye"} '
        '(called with {"text": "hi"})',
        "tool 'danger' was not called (called: echo)",
        "tool 'echo' was called (1 time(s))",
        "took 2 steps, at most 1 expected",
        f"used {wrong['tokens']} tokens, at most 10 expected",
        "cost unknown (the model's usage carries no price), max_cost cannot hold",
    ]
    (exhausted,) = row(report, "exhausted")["results"]
    assert len(exhausted["failures"]) == 1 and "is exhausted" in exhausted["failures"][0]
    assert exhausted["failures"][0].startswith("error: scripted: script ")
    assert row(report, "exhausted-allowed")["ok"]


def test_the_baseline_shows_what_regressed_and_improved(isolated: Path) -> None:
    agent = eval_agent(isolated, {"two.yaml": TWO}, {"echo": ECHO_THEN_ANSWER})
    assert eve("eval", "--json", "before.json").exit_code == 1
    (agent / "evals" / "echo.json").write_text(
        json.dumps([reply("", call("echo", text="hi")), reply("The answer is 43")])
    )
    result = eve("eval", "--baseline", "before.json", "--json", "after.json")
    assert result.exit_code == 1  # good now fails, bad passes
    compared: dict[str, Any] = report_of(isolated / "after.json")["baseline"]
    assert compared["regressed"] == ["good"] and compared["improved"] == ["bad"]
    assert compared["overall"]["passRate"]["change"] == "same"
    assert "regressed good passRate 1.000 -> 0.000" in result.stdout
    assert "improved  bad passRate 0.000 -> 1.000" in result.stdout
    broken = eve("eval", "--baseline", "two.yaml")
    assert broken.exit_code == 2 and "--baseline two.yaml: cannot read it" in broken.stderr


REPLAYED = """
    cases:
      - name: approve
        model: scripted:danger.json
        messages: ["go"]
        answers: [{approve: true}]
        expect: {contains: done}
"""


def test_replay_runs_recorded_cases_on_new_code_without_the_model(isolated: Path) -> None:
    scripts = {"danger": [reply("", call("danger", x=3)), reply("done")]}
    agent = eval_agent(isolated, {"r.yaml": REPLAYED}, scripts)
    assert eve("eval").exit_code == 0
    (agent / "evals" / "danger.json").unlink()  # no model answers left to ask
    same = eve("eval", "--replay", "--json", "same.json")
    assert same.exit_code == 0, same.output
    assert report_of(isolated / "same.json")["replay"] is True
    tools = (agent / "tools" / "tools.py").read_text()
    (agent / "tools" / "tools.py").write_text(
        tools.replace("approval=always()", "approval=never()")
    )
    changed = eve("eval", "--replay", "--json", "changed.json")
    assert changed.exit_code == 1
    (result,) = row(report_of(isolated / "changed.json"), "approve")["results"]
    assert [d["kind"] for d in result["divergences"]] == ["approval-changed"]
    assert "[approval-changed]" in changed.stdout


def test_parallel_runs_and_repeats_make_one_session_each(isolated: Path) -> None:
    cases = "cases:\n" + "".join(
        f"  - {{name: c{i}, model: 'scripted:echo.json', messages: [hi], "
        "expect: {contains: '42'}}\n"
        for i in range(6)
    )
    eval_agent(isolated, {"many.yaml": cases}, {"echo": ECHO_THEN_ANSWER})
    result = eve("eval", "-j", "4", "--repeat", "2", "--json", "r.json")
    assert result.exit_code == 0, result.output
    report = report_of(isolated / "r.json")
    sessions = [r["session"] for c in report["cases"] for r in c["results"]]
    assert len(sessions) == len(set(sessions)) == 12
    assert all(c["repetitions"] == 2 and c["passRate"] == 1.0 for c in report["cases"])
    assert result.stderr.count("✓") == 12


def test_the_case_eve_init_scaffolds_passes_offline(isolated: Path) -> None:
    assert eve("init").exit_code == 0
    assert (isolated / "agent" / "evals" / "example.yaml").is_file()
    result = eve("eval", "--json", "r.json")
    assert result.exit_code == 0, result.output
    assert report_of(isolated / "r.json")["summary"]["passed"] == 2
    assert not (isolated / "notes").exists()  # save_note was stubbed


def test_usage_mistakes_are_one_line_and_exit_2(isolated: Path) -> None:
    eval_agent(isolated, {"two.yaml": TWO}, {"echo": ECHO_THEN_ANSWER})
    for args, said in [
        (["-j", "0"], "--jobs must be 1 or more"),
        (["--repeat", "0"], "--repeat must be 1 or more"),
        (["--threshold", "2"], "--threshold is a pass rate from 0 to 1"),
        (["-m", "gpt"], "unknown model 'gpt'"),
        (["--agent", "nowhere"], "agent folder nowhere does not exist"),
        (["--replay"], "no finished run in .eve-evals to replay: run eve eval first"),
    ]:
        result = eve("eval", *args)
        assert result.exit_code in (1, 2), (args, result.output)
        assert said in result.stderr and result.stderr.count("\n") == 1, (args, result.stderr)


def test_model_option_runs_every_case_on_that_model(isolated: Path) -> None:
    agent = eval_agent(isolated, {"two.yaml": TWO}, {"echo": ECHO_THEN_ANSWER})
    other = agent / "other.json"
    other.write_text(json.dumps([reply("The answer is 43")]))
    result = eve("eval", "-m", f"scripted:{other}", "--json", "r.json")
    report = report_of(isolated / "r.json")
    assert report["model"] == f"scripted:{other}"
    assert (row(report, "good")["ok"], row(report, "bad")["ok"]) == (False, True)
    assert result.exit_code == 1


def test_a_world_given_to_eve_keeps_the_sessions(isolated: Path) -> None:
    eval_agent(isolated, {"two.yaml": TWO}, {"echo": ECHO_THEN_ANSWER})
    assert eve("--data", "kept", "eval", "good", "--json", "r.json").exit_code == 0
    (run,) = row(report_of(isolated / "r.json"), "good")["results"]
    assert report_of(isolated / "r.json")["world"] == "kept"
    shown = eve("log", run["session"], "--data", "kept")
    assert shown.exit_code == 0 and "The answer is 42" in shown.stdout
    assert not (isolated / ".eve-evals" / "world").exists()


def test_a_sub_agents_tool_can_be_stubbed(isolated: Path) -> None:
    from tests.eve_cli.evals.eval_support import TOOLS
    from tests.eve_cli.rt_support import write_agent

    written = {"name": "write_file", "arguments": {"name": "sub.txt", "text": "x"}}
    agent = write_agent(
        isolated / "agent",
        script=[reply("", call("helper", task="write it")), reply("all done")],
        subagents={
            "helper": {"script": [reply("", written), reply("wrote")], "tools": {"t": TOOLS}}
        },
    )
    (agent / "evals").mkdir()
    (agent / "evals" / "sub.yaml").write_text(
        "cases:\n  - name: sub\n    messages: [go]\n"
        "    stubs: [{tool: write_file, result: pretend}]\n"
        "    expect: {contains: all done, tools_called: [helper]}\n"
    )
    result = eve("eval", "--json", "r.json")
    assert result.exit_code == 0, result.output
    assert not (isolated / "sub.txt").exists()


def test_a_second_eval_in_the_same_directory_is_refused(isolated: Path) -> None:
    import filelock

    eval_agent(isolated, {"two.yaml": TWO}, {"echo": ECHO_THEN_ANSWER})
    (isolated / ".eve-evals").mkdir()
    with filelock.FileLock(str(isolated / ".eve-evals" / "lock")):
        busy = eve("eval", "good")
    assert busy.exit_code == 1
    assert (
        busy.stderr == "eve: error: another eve eval is running in .eve-evals; wait for it to end\n"
    )
    assert eve("eval", "good").exit_code == 0  # the lock is the holder's alone
