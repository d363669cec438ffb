"""`eve eval` against OpenAI- and Anthropic-shaped servers on 127.0.0.1: a flaky case's pass
rate over repeats against its threshold, and an LLM judge whose score and reason are kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from eve_cli.cli.app import app
from tests.eve_cli.evals.eval_support import eval_agent, report_of, row
from tests.eve_cli.models.scriptserver import Reply, ScriptServer, sse

DONE = b"data: [DONE]\n\n"


def openai_text(text: str) -> Reply:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    usage = sse({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 4}})
    return Reply(chunks=[chunk({"content": text}), chunk({}, "stop"), usage, DONE])


def anthropic_text(text: str) -> Reply:
    def an(kind: str, **data: Any) -> bytes:
        return sse({"type": kind, **data}, event=kind)

    return Reply(chunks=[
        an("message_start", message={"usage": {"input_tokens": 30, "output_tokens": 1}}),
        an("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        an("content_block_delta", index=0, delta={"type": "text_delta", "text": text}),
        an("content_block_stop", index=0),
        an("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
        an("message_stop"),
    ])  # fmt: skip


FLAKY = """
    cases:
      - name: flaky
        messages: ["are you sure?"]
        expect: {contains: "yes"}
"""


def test_a_flaky_case_has_a_pass_rate_held_against_its_threshold(
    isolated: Path, server: ScriptServer
) -> None:
    eval_agent(isolated, {"f.yaml": FLAKY}, model="openai:gpt-test")
    runner = CliRunner()
    server.add(*(openai_text(t) for t in ("yes", "no", "yes", "no")))
    strict = runner.invoke(app, ["eval", "--repeat", "4", "--json", "r.json"])
    assert strict.exit_code == 1, strict.output
    flaky = row(report_of(isolated / "r.json"), "flaky")
    assert (flaky["repetitions"], flaky["passed"], flaky["passRate"]) == (4, 2, 0.5)
    assert [r["passed"] for r in flaky["results"]] == [True, False, True, False]
    assert flaky["tokens"] == 44  # the provider's usage, not an estimate
    assert "flaky │  2/4 │  50% │ 100%" in strict.stdout
    assert "flaky (passed some runs, not all): flaky" in strict.stdout
    assert report_of(isolated / "r.json")["summary"]["flaky"] == ["flaky"]
    server.add(*(openai_text(t) for t in ("yes", "no", "yes", "no")))
    lenient = runner.invoke(app, ["eval", "--repeat", "4", "--threshold", "0.5"])
    assert lenient.exit_code == 0, lenient.output
    assert len(server.requests) == 8


JUDGED = """
    judge_model: openai:judge-1
    cases:
      - name: polite
        messages: ["hello"]
        expect:
          judge: {rubric: "The reply greets the user politely.", min_score: 0.8}
      - name: rude
        messages: ["hello"]
        expect:
          judge:
            rubric: "The reply greets the user politely."
"""


def test_a_judge_grades_replies_and_its_score_and_reason_are_kept(
    isolated: Path, server: ScriptServer
) -> None:
    eval_agent(isolated, {"j.yaml": JUDGED}, model="anthropic:claude-test")
    server.add(
        anthropic_text("Hello, how can I help you today?"),
        openai_text('{"score": 0.9, "reason": "A warm greeting."}'),
        anthropic_text("What do you want."),
        openai_text('Sure: {"score": 0.2, "reason": "Curt and unfriendly."}'),
    )
    result = CliRunner().invoke(app, ["eval", "--json", "r.json"])
    assert result.exit_code == 1, result.output
    report = report_of(isolated / "r.json")
    (polite,) = row(report, "polite")["results"]
    assert polite["passed"] and polite["judge"] == {
        "model": "openai:judge-1", "score": 0.9, "reason": "A warm greeting.", "passed": True,
    }  # fmt: skip
    (rude,) = row(report, "rude")["results"]
    assert rude["judge"]["score"] == 0.2 and not rude["passed"]
    assert rude["failures"] == ["judge (openai:judge-1): score 0.2 < 0.7: Curt and unfriendly."]
    paths = [seen.path for seen in server.requests]
    assert paths == ["/v1/messages", "/v1/chat/completions"] * 2
    judged = json.dumps(server.requests[1].body)
    assert "greets the user politely" in judged and "Hello, how can I help you today?" in judged
    assert "sk-eval" not in (isolated / "r.json").read_text()


def test_the_judge_model_comes_from_the_option_or_the_environment(
    isolated: Path, server: ScriptServer, monkeypatch: Any
) -> None:
    case = "cases:\n  - {name: j, messages: [hi], expect: {judge: 'Says hi.'}}\n"
    eval_agent(isolated, {"j.yaml": case}, model="openai:agent")
    runner = CliRunner()
    server.add(openai_text("hi"))
    nothing = runner.invoke(app, ["eval", "--json", "r.json"])
    assert nothing.exit_code == 1
    (run,) = row(report_of(isolated / "r.json"), "j")["results"]
    assert run["failures"][0].startswith("no judge model: set judge.model")
    server.requests.clear()
    server.add(openai_text("hi"), openai_text('{"score": 1, "reason": "ok"}'))
    assert runner.invoke(app, ["eval", "--judge-model", "openai:from-option"]).exit_code == 0
    monkeypatch.setenv("EVE_JUDGE_MODEL", "openai:from-env")
    server.add(openai_text("hi"), openai_text('{"score": 1, "reason": "ok"}'))
    assert runner.invoke(app, ["eval"]).exit_code == 0
    models = [seen.body.get("model") for seen in server.requests]
    assert models == ["agent", "from-option", "agent", "from-env"]


def anthropic_tool(name: str, arguments: dict[str, Any]) -> Reply:
    def an(kind: str, **data: Any) -> bytes:
        return sse({"type": kind, **data}, event=kind)

    block = {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}
    return Reply(chunks=[
        an("message_start", message={"usage": {"input_tokens": 30, "output_tokens": 1}}),
        an("content_block_start", index=0, content_block=block),
        an("content_block_delta", index=0,
           delta={"type": "input_json_delta", "partial_json": json.dumps(arguments)}),
        an("content_block_stop", index=0),
        an("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
        an("message_stop"),
    ])  # fmt: skip


STUBBED = """
    cases:
      - name: writes
        messages: ["write the report"]
        stubs:
          - tool: write_file
            arguments: {name: "report\\\\.txt"}
            result: "wrote report.txt (stub)"
        expect:
          tools_called: [{name: write_file, arguments: {name: report.txt, text: "Q.*"}}]
          contains: "Written"
"""


def test_a_live_models_tool_call_meets_the_stub(isolated: Path, server: ScriptServer) -> None:
    eval_agent(isolated, {"s.yaml": STUBBED}, model="anthropic:claude-test")
    server.add(
        anthropic_tool("write_file", {"name": "report.txt", "text": "Q3 numbers"}),
        anthropic_text("Written."),
    )
    result = CliRunner().invoke(app, ["eval", "--json", "r.json"])
    assert result.exit_code == 0, result.output
    assert not (isolated / "report.txt").exists()
    # The model saw the stub's result as the tool's.
    second = json.dumps(server.requests[1].body)
    assert "wrote report.txt (stub)" in second
