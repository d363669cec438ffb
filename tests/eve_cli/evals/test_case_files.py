"""Case files: the whole format read into cases, and each mistake one ``file:line: what`` line
(from the loader and from `eve eval`, exit 2, no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from eve_cli._loader import load_agent
from eve_cli.cli.app import app
from eve_cli.evals import CaseErrors, load_cases
from tests.eve_cli.evals.eval_support import eval_agent

FULL = """
    model: scripted:basic.json
    judge_model: openai:judge-1
    tags: [smoke]
    cases:
      - name: full
        description: every key
        messages: ["one", "two"]
        answers:
          - approve: false
            tool: danger
          - answer: blue
        stubs:
          - tool: write_file
            arguments: {name: "out.*"}
            result: {ok: true}
            error: false
        tags: [tools]
        threshold: 0.5
        expect:
          contains: ["a", "b"]
          not_contains: sorry
          regex: "^x"
          equals: "x"
          json_schema: {type: object}
          result_schema: {type: object, required: [n]}
          tools_called:
            - echo
            - name: write_file
              arguments: {name: "out.txt"}
          tools_not_called: [danger]
          max_steps: 4
          max_tokens: 1000
          max_cost: 0.5
          max_seconds: 30
          no_error: false
          judge: {rubric: "is polite", min_score: 0.8}
          check: checks.py:ok
      - name: short
        message: hi
"""


def _load(agent: Path) -> list:  # type: ignore[type-arg]
    return load_cases(agent, load_agent(agent))


def test_the_whole_format_reads_into_cases(isolated: Path) -> None:
    agent = eval_agent(
        isolated, {"basic.yaml": FULL, "checks.py": "def ok(run):\n    return True\n"}
    )
    full, short = _load(agent)
    assert full.messages == ("one", "two") and full.tags == ("smoke", "tools")
    assert full.model == f"scripted:{agent / 'evals' / 'basic.json'}"
    assert full.judge_model == "openai:judge-1" and full.threshold == 0.5
    assert [(a.approve, a.text, a.tool) for a in full.answers] == [
        (False, None, "danger"), (None, "blue", None)
    ]  # fmt: skip
    assert full.stubs[0].tool == "write_file" and full.stubs[0].result == '{"ok": true}'
    e = full.expect
    assert e.contains == ("a", "b") and e.not_contains == ("sorry",) and e.equals == "x"
    assert [t.name for t in e.tools_called] == ["echo", "write_file"]
    assert e.max_steps == 4 and e.max_cost == 0.5 and e.no_error is False
    assert e.judge is not None and e.judge.min_score == 0.8 and e.check is not None
    assert full.line == 5 and short.line == 38
    assert short.messages == ("hi",) and short.threshold is None and short.expect.no_error


BAD = [
    ("cases:\n  - name: a\n    messages: [x\n", 4, "not valid YAML"),
    ("cases:\n  - name: a\n    messages: [x]\n    expect:\n      contians: x\n", 5,
     "unknown expectation key 'contians' (did you mean 'contains'?)"),
    ("cases:\n  - name: a\n    messages: [x]\n    stubs:\n      - tool: nope\n        result: r\n",
     5, "the agent has no tool 'nope'"),
    ("cases:\n  - name: a\n    messages: [x]\n    expect:\n      tools_not_called: [echo, gone]\n",
     5, "the agent has no tool 'gone'"),
    ("cases:\n  - name: a\n    messages: [x]\n    expect:\n      regex: '('\n", 5,
     "is not a regular expression"),
    ("cases:\n  - name: a\n", 2, "a case needs 'messages'"),
    ("cases:\n  - messages: [x]\n", 2, "case needs 'name'"),
    ("cases:\n  - name: a\n    messages: [x]\n    expect:\n      max_steps: -1\n", 5,
     "'max_steps' must be a whole number (0 or more)"),
    ("cases:\n  - name: a\n    messages: [x]\n    expect:\n      check: nothere.py:f\n", 5,
     "check 'nothere.py:f': no file"),
    ("cases:\n  - name: a\n    messages: [x]\n    model: gpt\n", 4, "unknown model 'gpt'"),
    ("cases:\n  - name: a\n    messages: [x]\n  - name: a\n    messages: [y]\n", 4,
     "case 'a' is already defined at"),
    ("cases:\n  - name: a\n    messages: [x]\n    answers:\n      - {approve: yes, answer: b}\n",
     5, "an answer is 'approve: true|false' or 'answer: TEXT'"),
    ("cases:\n  - name: a\n    messages: [x]\n    expect:\n      json_schema: {type: 3}\n", 5,
     "is not a valid JSON schema"),
    ("casez: []\n", 1, "unknown file key 'casez'"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line", "message"), BAD)
def test_each_mistake_is_one_line_with_file_and_line(
    isolated: Path, text: str, line: int, message: str
) -> None:
    agent = eval_agent(isolated, {"bad.yaml": text})
    with pytest.raises(CaseErrors) as caught:
        _load(agent)
    (error,) = caught.value.errors
    assert str(error).startswith(f"{agent / 'evals' / 'bad.yaml'}:{line}: "), str(error)
    assert message in str(error) and "\n" not in str(error)


def test_python_case_files_report_their_lines(isolated: Path) -> None:
    head = "from eve_cli.evals import case\n\n"
    good = head + "case(name='p', messages=['hi'], expect={'contains': 'x'})\n"
    broken = "from eve_cli.evals import case\n\nx = 1\nraise RuntimeError('boom')\n"
    wrong = (
        "from eve_cli.evals import case\n\ncase(name='q', messages=['hi'], expect={'nope': 1})\n"
    )
    agent = eval_agent(isolated, {"good.py": good, "broken.py": broken, "wrong.py": wrong})
    with pytest.raises(CaseErrors) as caught:
        _load(agent)
    lines = sorted(str(e) for e in caught.value.errors)
    evals = agent / "evals"
    assert lines == [
        f"{evals / 'broken.py'}:4: RuntimeError: boom",
        f"{evals / 'wrong.py'}:3: unknown expectation key 'nope' (known: check, contains, "
        "equals, json_schema, judge, max_cost, max_seconds, max_steps, max_tokens, no_error, "
        "not_contains, regex, result_schema, tools_called, tools_not_called)",
    ]
    (agent / "evals" / "broken.py").unlink()
    (agent / "evals" / "wrong.py").unlink()
    (case,) = _load(agent)
    assert case.name == "p" and case.line == 3


def test_eve_eval_prints_every_mistake_one_line_each_and_exits_2(isolated: Path) -> None:
    eval_agent(isolated, {"a.yaml": BAD[0][0], "b.yaml": BAD[1][0]})
    result = CliRunner().invoke(app, ["eval"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("eve: error: ") and "a.yaml:4: not valid YAML" in lines[0]
    assert "b.yaml:5: unknown expectation key 'contians'" in lines[1]
    assert "Traceback" not in result.output
