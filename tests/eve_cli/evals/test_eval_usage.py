"""Cost and structured results in eval cases (issue 34's usage and `result` event): a priced
scripted model's cost held against max_cost and kept in the report, and an output schema's
result checked by result_schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eve_cli.cli.app import app
from tests.eve_cli.evals.eval_support import eval_agent, report_of, row
from tests.eve_cli.models.scriptserver import ScriptServer
from tests.eve_cli.rt_support import reply

# $1 per million input tokens, $2 per million output: a call of 200,000 in and 50,000 out
# costs $0.30.
PRICES = {"scripted": {"input": 1, "output": 2}}
USAGE = {"input": 200_000, "output": 50_000}
CASES = """
    cases:
      - name: cheap-enough
        model: scripted:answer.json
        messages: ["add 2 and 3"]
        expect:
          max_cost: 0.5
          result_schema: {type: object, required: [total], properties: {total: {type: integer}}}
      - name: too-dear
        model: scripted:answer.json
        messages: ["add 2 and 3"]
        expect:
          max_cost: 0.1
          result_schema: {type: object, properties: {total: {type: string}}}
"""


def test_cost_and_structured_result_of_a_case(isolated: Path) -> None:
    agent = eval_agent(isolated, {"c.yaml": CASES},
                       {"answer": [reply('{"total": 5}', usage=USAGE)]})  # fmt: skip
    (agent / "prices.json").write_text(json.dumps(PRICES))
    schema = {"type": "object", "properties": {"total": {"type": "integer"}}}
    (agent / "agent.py").write_text(
        "from eve_cli import define_agent\n\n"
        f"agent = define_agent(model='demo', output_schema={schema!r})\n"
    )
    result = CliRunner().invoke(app, ["eval", "--json", "r.json"])
    assert result.exit_code == 1, result.output
    report = report_of(isolated / "r.json")
    cheap, dear = row(report, "cheap-enough"), row(report, "too-dear")
    assert cheap["ok"] and cheap["cost"] == pytest.approx(0.3)
    (run,) = dear["results"]
    assert run["failures"] == [
        "result does not fit the schema at total: 5 is not of type 'string'",
        "cost 0.3, at most 0.1 expected",
    ]
    assert report["summary"]["cost"] == pytest.approx(0.3)


FAKE_CASES = """
    cases:
      - name: echoes
        messages: ["say hi"]
        expect:
          tools_called: [{name: echo, arguments: {text: hi}}]
          contains: "42"
          max_cost: 1
          judge: {rubric: "It gives the answer.", model: "openai:judge"}
"""


def test_a_case_against_the_fake_messages_api_that_enforces_its_rules(
    isolated: Path, server: ScriptServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.eve_cli.evals.test_eval_providers import openai_text
    from tests.eve_cli.models.fake_anthropic import Answer, FakeAnthropic

    eval_agent(isolated, {"c.yaml": FAKE_CASES}, model="anthropic:claude-sonnet-4-5")
    answers = [Answer(tools=[("echo", {"text": "hi"})]), Answer(text="The answer is 42.")]
    server.add(openai_text('{"score": 0.9, "reason": "Gives it."}'))
    with FakeAnthropic(answers) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        result = CliRunner().invoke(app, ["eval", "--json", "r.json"])
    assert fake.violations == []
    assert result.exit_code == 0, result.output
    (run,) = row(report_of(isolated / "r.json"), "echoes")["results"]
    assert run["cost"] is not None and run["cost"] > 0  # priced from the model's table
    assert run["judge"]["score"] == 0.9 and len(fake.requests) == 2
