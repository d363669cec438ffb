"""`eve replay` picks the agent a recording was made with: a cassette without `--agent` is
replayed against `./agent` only if that is its agent (said on stderr), and refused in one
line otherwise, never against another agent; `--all` reports every session, one that cannot
be replayed included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.eve_cli.rt_support import write_agent


def _eve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip


def _agent(folder: Path, name: str) -> Path:
    return write_agent(
        folder, script=[{"text": "hello there", "tool_calls": []}], agent_args=f"name={name!r}"
    )


def test_a_cassette_replays_against_its_own_agent_or_is_refused(tmp_path: Path) -> None:
    work = tmp_path / "work"
    agent = _agent(work / "agent", "greeter")
    ran = _eve("chat", "-p", "hi", cwd=work)
    assert ran.returncode == 0, ran.stderr
    sid = json.loads(_eve("inspect", "--json", cwd=work).stdout)[0]["id"]
    tape = tmp_path / "greeter.json"
    assert _eve("export", sid, "-o", str(tape), cwd=work).returncode == 0
    same = _eve("replay", str(tape), cwd=work)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no divergence" in same.stdout
    assert same.stderr.strip() == f"replaying {tape} against agent 'greeter' ({agent})"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = _eve("replay", str(tape), cwd=elsewhere)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "recorded with agent 'greeter'" in lines[0]
    assert "the built-in agent" in lines[0] and "--agent DIR" in lines[0]
    named = _eve("replay", str(tape), "--agent", str(agent), cwd=elsewhere)
    assert named.returncode == 0 and "no divergence" in named.stdout


def test_replay_all_reports_every_session_when_one_cannot_be_replayed(tmp_path: Path) -> None:
    work = tmp_path / "work"
    first, second = _agent(work / "one", "one"), _agent(work / "two", "two")
    for folder in (first, second):
        assert _eve("chat", "--agent", str(folder), "-p", "hi", cwd=work).returncode == 0
    shutil.rmtree(first)  # the first session's agent is gone
    every = _eve("replay", "--all", cwd=work)
    assert every.returncode == 1, every.stdout + every.stderr
    lines = every.stdout.strip().splitlines()
    assert len(lines) == 2
    assert sum("not replayed:" in line for line in lines) == 1
    assert sum("no divergence (1 turn(s) replayed)" in line for line in lines) == 1
