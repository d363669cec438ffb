"""The README's "Evals" example, written into the folder `eve init` makes and run by `eve
eval` (its judge served by an OpenAI-shaped server on 127.0.0.1), and its pytest snippet."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from eve_cli.cli.app import app
from eve_cli.testing import expect, run_eval_case
from tests.eve_cli.evals.eval_support import report_of, row
from tests.eve_cli.evals.test_eval_providers import openai_text
from tests.eve_cli.models.scriptserver import ScriptServer

README = Path(__file__).resolve().parents[3] / "README.md"
JUDGED = '{"score": 0.95, "reason": "It gives the count."}'


def readme_files() -> dict[str, str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Evals") : text.index("## Performance")]
    files = {}
    for block in re.findall(r"```(?:python|yaml)\n(.*?)```", section, re.DOTALL):
        first = block.partition("\n")[0]
        if first.startswith("# agent/"):
            files[first.removeprefix("# ")] = block
    return files


def test_the_readme_example_runs_as_documented(isolated: Path, server: ScriptServer) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["init"]).exit_code == 0
    files = readme_files()
    assert set(files) == {"agent/evals/basics.yaml", "agent/evals/checks.py",
                          "agent/evals/more.py"}  # fmt: skip
    Path("agent/evals/example.yaml").unlink()  # the same two cases, as `eve init` writes them
    for path, body in files.items():
        Path(path).write_text(body, encoding="utf-8")
    server.add(openai_text(JUDGED))
    result = runner.invoke(app, ["eval", "--json", "r.json"])
    assert result.exit_code == 0, result.output
    report = report_of(isolated / "r.json")
    assert [c["name"] for c in report["cases"]] == ["counts-words", "saves-a-note", "greets"]
    assert row(report, "counts-words")["results"][0]["judge"]["score"] == 0.95
    assert not (isolated / "notes").exists()  # the stubbed save_note never ran
    assert [seen.body["model"] for seen in server.requests] == ["gpt-4o-mini"]

    server.add(openai_text(JUDGED))
    run = run_eval_case("counts-words", agent="agent", model="demo")
    assert run.passed, run.failures
    assert expect(run, contains="4", tools_called=["count_words"]) == []
