"""`eve eval --world URL`: the sessions kept in a PostgreSQL world, opened and replayed from
there; its password never written to the eval directory or a report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eve_cli.cli.app import app
from tests.eve_cli.evals.eval_support import eval_agent, report_of
from tests.eve_cli.rt_support import call, reply
from tests.pg_support import fresh_schema

CASES = """
    cases:
      - name: kept
        model: scripted:echo.json
        messages: ["say hi"]
        expect: {contains: "42", tools_called: [echo]}
"""


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as found:
        yield found.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")


def test_sessions_kept_in_a_database_world(isolated: Path, url: str) -> None:
    scripts = {"echo": [reply("", call("echo", text="hi")), reply("The answer is 42")]}
    eval_agent(isolated, {"c.yaml": CASES}, scripts)
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "--world", url, "--json", "r.json", "--repeat", "2"])
    assert result.exit_code == 0, result.output
    report = report_of(isolated / "r.json")
    sessions = {r["session"] for r in report["cases"][0]["results"]}
    listed = runner.invoke(app, ["inspect", "--world", url, "--json"])
    assert {row["id"] for row in json.loads(listed.stdout)} == sessions
    assert not (isolated / ".eve-evals" / "world").exists()
    replayed = runner.invoke(app, ["eval", "--replay", "--world", url])
    assert replayed.exit_code == 0, replayed.output
    refused = runner.invoke(app, ["eval", "--replay"])
    assert refused.exit_code == 2 and "give it again with --world" in refused.stderr
    written = [p.read_text() for p in [*(isolated / ".eve-evals").iterdir(), isolated / "r.json"]]
    assert all("hunter2" not in text for text in written)
