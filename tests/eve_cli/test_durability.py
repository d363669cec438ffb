"""D1–D8 at session level on the local and the PostgreSQL world (`world_spec`): real
subprocesses killed with SIGKILL, resumed by a new process; the transcript must equal an
uninterrupted run's and finished actions never repeat (counted through a tool that appends to
a file)."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import DRIVER, AgentFactory, brief, call, reply, side_effect_tool
from tests.pg_support import stored_blobs

# Kills real processes / crash states / a browser: the slow suite (`pytest -m slow`).
pytestmark = pytest.mark.slow

SCRIPT = [
    reply("", call("record", text="a")),
    reply("thinking about b", call("record", text="b"), delay=0.4),
    reply("", call("ask_question", question="Continue?")),
    reply("finished"),
]


class Proc:
    """A driver subprocess whose stdout lines are read by a thread (bounded waits)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-c", DRIVER, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.seen: list[str] = []

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, marker: str, timeout: float = 30) -> None:
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                err = self.popen.stderr.read() if self.popen.stderr else ""
                raise AssertionError(f"process ended before {marker!r}: {self.seen}\n{err}")
            self.seen.append(line)
            if line.startswith(marker):
                return

    def kill_at(self, marker: str) -> None:
        self.wait_for(marker)
        self.popen.send_signal(signal.SIGKILL)
        self.finish()
        assert self.popen.returncode == -signal.SIGKILL

    def finish(self, timeout: float = 60) -> list[str]:
        while (line := self.lines.get(timeout=timeout)) is not None:
            self.seen.append(line)
        _, err = self.popen.communicate(timeout=timeout)
        assert self.popen.stdout is not None
        self.popen.stdout.close()
        assert self.popen.returncode in (0, -signal.SIGKILL), err
        return self.seen


class Scenario:
    """One session of the SCRIPT agent in its own world (`data`: a data directory or a
    PostgreSQL URL; default a directory under `root`)."""

    def __init__(self, root: Path, make_agent: AgentFactory, data: str | None = None) -> None:
        root.mkdir(parents=True, exist_ok=True)  # the tool's log goes there
        self.log = root / "effects.log"
        self.data = data or str(root / "data")
        self.agent = make_agent(
            script=SCRIPT, tools={"rec": side_effect_tool(self.log)}, agent_args="name='durable'"
        )
        self.rt = Runtime(data_dir=self.data, agent_dir=self.agent)
        self.sid = asyncio.run(self.rt.create_session())
        asyncio.run(self.rt.deliver(self.sid, "go"))

    def proc(self, env: dict[str, str] | None = None) -> Proc:
        return Proc(self.data, str(self.agent), "drive", self.sid, env=env)

    def drive_to_question(self) -> None:
        """A fresh process resumes the session: no user action but opening it (D3)."""
        lines = self.proc().finish()
        assert lines[-1] == "VIEW parked", lines

    def answer_and_finish(self) -> None:
        view = self.rt.session(self.sid)
        [request] = view["pending"]
        asyncio.run(
            self.rt.respond(self.sid, [{"requestId": request["requestId"], "answer": "yes"}])
        )
        lines = self.proc().finish()
        assert lines[-1] == "VIEW waiting", lines

    def transcript(self) -> list[tuple[Any, ...]]:
        events = self.rt.events(self.sid)
        streamed: dict[tuple[Any, Any], str] = {}
        for e in events:
            if e["type"] == "message.appended":
                where = (e.get("turnId"), e.get("stepIndex"))
                streamed[where] = streamed.get(where, "") + e["delta"]
        # The history too: a reply stored by a model call's step and then re-run (killed before
        # the step's record) must be there once, never twice (D1/D2).
        history = [(m["role"], m.get("content")) for m in self.rt.history(self.sid)]
        return [*brief(events), *sorted(streamed.items()), *history]

    def effects(self) -> Counter[str]:
        return Counter(self.log.read_text().splitlines())


_REFERENCE: list[list[tuple[Any, ...]]] = []


@pytest.fixture
def reference(tmp_path: Path, make_agent: AgentFactory) -> list[tuple[Any, ...]]:
    """The uninterrupted run's transcript (computed once, in this process)."""
    if not _REFERENCE:
        run = Scenario(tmp_path / "reference", make_agent)
        view = asyncio.run(run.rt.drive(run.sid))
        [request] = view["pending"]
        answer = {"requestId": request["requestId"], "answer": "yes"}
        asyncio.run(run.rt.respond(run.sid, [answer]))
        assert asyncio.run(run.rt.drive(run.sid))["status"] == "waiting"
        texts = [e["text"] for e in run.rt.events(run.sid) if e["type"] == "message.completed"]
        assert texts == ["", "thinking about b", "", "finished"]
        _REFERENCE.append(run.transcript())
    return _REFERENCE[0]


def keys(effects: Counter[str], sid: str) -> tuple[str, str]:
    return f"{sid}:t1:call_0_0", f"{sid}:t1:call_1_0"


def test_kill_during_model_call(
    tmp_path: Path, make_agent: AgentFactory, reference: Any, world_spec: str
) -> None:
    run = Scenario(tmp_path / "run", make_agent, world_spec)
    run.proc().kill_at("EVENT message.appended")  # call 1 streams, then waits 1 s
    run.drive_to_question()
    run.answer_and_finish()
    assert run.transcript() == reference
    # The re-run's deltas continue the first run's: its record keeps the text whole.
    [model_1] = [r for r in run.rt.engine.history(f"{run.sid}.0") if r.get("name") == "model:1"]
    assert model_1["ok"]["text"] == "thinking about b"
    a, b = keys(run.effects(), run.sid)
    # D1/D2: the tool of the committed action ran once; nothing else repeated.
    assert run.effects() == Counter(
        {f"start {a}": 1, f"end {a}": 1, f"start {b}": 1, f"end {b}": 1}
    )


def test_kill_during_tool_reruns_only_that_tool(
    tmp_path: Path, make_agent: AgentFactory, reference: Any, world_spec: str
) -> None:
    run = Scenario(tmp_path / "run", make_agent, world_spec)
    (tmp_path / "run" / "effects.log.stall").write_text("")
    run.proc().kill_at("TOOL-STALL")
    run.drive_to_question()
    run.answer_and_finish()
    assert run.transcript() == reference
    a, b = keys(run.effects(), run.sid)
    # D2: only the in-flight tool ran again, with the same idempotency key.
    assert run.effects() == Counter(
        {f"start {a}": 2, f"end {a}": 1, f"start {b}": 1, f"end {b}": 1}
    )


def test_kill_while_parked_and_wake_from_other_processes(
    tmp_path: Path, make_agent: AgentFactory, reference: Any, world_spec: str
) -> None:
    run = Scenario(tmp_path / "run", make_agent, world_spec)
    run.proc().kill_at("EVENT turn.waiting")
    # D5: nothing holds the parked session; a delivery from this process and a drive from a
    # third one wake it where it stopped.
    run.drive_to_question()
    run.answer_and_finish()
    assert run.transcript() == reference
    assert set(run.effects().values()) == {1}


# Writes 6 and 8 carry a tool's checkpoint: a kill there re-runs that tool (D2), so its "end"
# effect repeats by design; the others must repeat nothing. (Write 3 is the child start; 5, 7
# and 10 are model calls' records, after their step stored the reply in history.)
@pytest.mark.parametrize("write", [2, 3, 5, 7, 10])
def test_kill_during_journal_write(
    tmp_path: Path, make_agent: AgentFactory, reference: Any, write: int, world_spec: str
) -> None:
    run = Scenario(tmp_path / "run", make_agent, world_spec)
    proc = run.proc(env={"EVE_FAULTS": f"crash_mid_write@{write}"})
    proc.finish()
    assert proc.popen.returncode == -signal.SIGKILL  # the fault really fired
    run.drive_to_question()
    run.answer_and_finish()
    assert run.transcript() == reference
    assert all(n == 1 for key, n in run.effects().items() if key.startswith("end "))


def test_second_owner_gets_a_clear_error(
    tmp_path: Path, make_agent: AgentFactory, world_spec: str
) -> None:
    from world import OwnershipError

    run = Scenario(tmp_path / "run", make_agent, world_spec)
    (tmp_path / "run" / "effects.log.stall").write_text("")
    proc = run.proc()
    proc.wait_for("TOOL-STALL")
    try:
        with pytest.raises(OwnershipError):
            asyncio.run(run.rt.drive(run.sid))
    finally:
        proc.popen.kill()
        proc.finish()
    run.drive_to_question()  # the owner died: the next process takes the session over


def test_nothing_of_the_agent_or_secrets_reaches_disk(
    tmp_path: Path, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, world_spec: str
) -> None:
    secret = "sk-test-SECRET-never-on-disk"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    run = Scenario(tmp_path / "run", make_agent, world_spec)
    (run.agent / "instructions.md").write_text("UNIQUE-INSTRUCTIONS-MARKER")
    run.drive_to_question()
    run.answer_and_finish()
    stored = stored_blobs(run.data)
    assert len(stored) > 5  # it read what the session stored
    for where, blob in stored:
        assert secret.encode() not in blob, where
        assert b"UNIQUE-INSTRUCTIONS-MARKER" not in blob, where
        assert b"scripted:" not in blob, where  # the agent's own model string is not kept


def test_subagent_wait_survives_a_kill(
    tmp_path: Path, make_agent: AgentFactory, world_spec: str
) -> None:
    """The parent waits on a sub-agent (a child run) holding nothing; killed while the child's
    tool runs, a new process finishes both and the child's finished work is not repeated."""
    log = tmp_path / "effects.log"
    parent_script = [reply("", call("helper", task="record c")), reply("parent done")]
    child = {
        "script": [reply("", call("record", text="c")), reply("child done")],
        "tools": {"rec": side_effect_tool(log)},
        "instructions": "Help.",
    }

    def session(data: str) -> tuple[Runtime, str, Path]:
        agent = make_agent(
            script=parent_script, subagents={"helper": child}, agent_args="name='parent'"
        )
        rt = Runtime(data_dir=data, agent_dir=agent)
        sid = asyncio.run(rt.create_session())
        asyncio.run(rt.deliver(sid, "go"))
        return rt, sid, agent

    ref_rt, ref_sid, _ = session(str(tmp_path / "ref" / "data"))
    assert asyncio.run(ref_rt.drive(ref_sid))["status"] == "waiting"
    reference = [(t, d.replace(ref_sid, "SID")) for t, d in brief(ref_rt.events(ref_sid))]
    log.unlink()

    rt, sid, agent = session(world_spec)
    (tmp_path / "effects.log.stall").write_text("")
    Proc(world_spec, str(agent), "drive", sid).kill_at("TOOL-STALL")
    lines = Proc(world_spec, str(agent), "drive", sid).finish()
    assert lines[-1] == "VIEW waiting", lines
    assert [(t, d.replace(sid, "SID")) for t, d in brief(rt.events(sid))] == reference
    [settled] = [e for e in rt.events(sid) if e["type"] == "task.settled"]
    assert settled["output"] == "child done"
    [key] = {line.split()[1] for line in log.read_text().splitlines()}
    assert Counter(log.read_text().splitlines()) == Counter({f"start {key}": 2, f"end {key}": 1})


def test_kill_after_a_reply_journaled_by_length(
    tmp_path: Path, make_agent: AgentFactory, reference: Any, world_spec: str
) -> None:
    """A model call whose delta events hold its whole reply journals only the reply's length;
    killed right after that record, before the reply reached history, a new process reads
    the reply back from those events: it is in history once, as streamed."""
    run = Scenario(tmp_path / "run", make_agent, world_spec)
    proc = run.proc(env={"EVE_FAULTS": "crash_after_fsync@7"})  # model call 1's record
    proc.finish()
    assert proc.popen.returncode == -signal.SIGKILL
    last = run.rt.engine.history(f"{run.sid}.0")[-1]  # the turn's run
    stored = [m["role"] for m in run.rt.world.stream_read(f"history.{run.sid}")]
    assert last["t"] == "step" and last["name"] == "model:1", last
    assert "text" not in last["ok"] and last["ok"]["ds"] == len("thinking about b"), last
    # The kill came before the history append: the user's message, the first (empty) reply
    # and its tool result are there, not the second reply.
    assert stored == ["user", "assistant", "tool"]
    run.drive_to_question()
    run.answer_and_finish()
    assert run.transcript() == reference
    assert all(n == 1 for key, n in run.effects().items() if key.startswith("end "))
    assert_reply_refers(run, 3, "thinking about b")


def assert_reply_refers(run: Scenario, index: int, text: str) -> None:
    """History item ``index`` stores no text: it refers to the delta events holding it, and
    a new process (cold caches) reads it back from them in history, events and inspect."""
    item = run.rt.world.stream_read(f"history.{run.sid}", index, index + 1)[0]
    assert item["role"] == "assistant" and "content" not in item and item["n"] == len(text)
    events = run.rt.world.stream_read(f"events.{run.sid}")
    start, count = item["e"]
    assert "".join(e["d"] for e in events[start : start + count]) == text
    read = subprocess.run(
        [sys.executable, "-c", READ_BACK, run.data, run.sid],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    history, completed, shown = read.stdout.splitlines()
    assert text in history.split("|") and text in completed.split("|"), read.stdout
    assert text in shown  # `eve inspect SESSION --json` shows the step's text


READ_BACK = r"""
import json, subprocess, sys
from eve_cli.runtime import Runtime
data, sid = sys.argv[1:3]
rt = Runtime(data_dir=data, load_agent=False)
print("|".join(str(m.get("content")) for m in rt.history(sid)))
print("|".join(e["text"] for e in rt.events(sid) if e["type"] == "message.completed"))
cli = [sys.executable, "-m", "eve_cli", "inspect", sid, "--json", "--world", data]
print(json.dumps(subprocess.run(cli, capture_output=True, text=True, check=True).stdout))
"""


def test_kill_after_a_reply_referring_to_its_events_reached_history(
    tmp_path: Path, make_agent: AgentFactory, reference: Any, world_spec: str
) -> None:
    """Killed while writing the record after model call 2's, when model call 1's history
    item, referring to its delta events, is on disk: a new process replays the turn and
    adopts that item, reading its text back from the events (nothing runs again)."""
    run = Scenario(tmp_path / "run", make_agent, world_spec)
    proc = run.proc(env={"EVE_FAULTS": "crash_mid_write@10"})
    proc.finish()
    assert proc.popen.returncode == -signal.SIGKILL
    records = run.rt.engine.history(f"{run.sid}.0")
    assert [r.get("name") for r in records[-2:]] == ["tool:call_1_0", "model:2"], records[-2:]
    stored = run.rt.world.stream_read(f"history.{run.sid}")
    roles = ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    if world_spec.startswith("postgresql://"):
        # Model call 2's item was appended after its record: PostgreSQL writes it with the
        # killed write's transaction, or on its batch thread 10 ms after the append if that
        # came first (the local world wrote it to the file before). Either way the replay
        # below must adopt or append it once.
        assert [m["role"] for m in stored] in (roles, roles[:-1])
    else:
        # The items appended since the last commit (tool 1's result, model call 2's reply)
        # were in the commit the kill tore (the family's write-ahead file), or in one before
        # it when a poll of the turn committed them first: the replay below appends them
        # again, or adopts them, once.
        assert [m["role"] for m in stored] in (roles[:4], roles)
    assert "content" not in stored[3] and "e" in stored[3]
    run.drive_to_question()
    run.answer_and_finish()
    assert run.transcript() == reference
    assert set(run.effects().values()) == {1}
    assert_reply_refers(run, 3, "thinking about b")
    assert_reply_refers(run, 7, "finished")
