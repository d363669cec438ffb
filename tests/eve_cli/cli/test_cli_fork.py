"""`eve fork` with real processes on the local and the PostgreSQL world (`world_spec`): a fork
of a session another `eve chat` is driving, and an `eve fork` killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eve_cli._events import Event
from eve_cli.execution._fork import forks_stream
from eve_cli.runtime import Runtime
from eve_cli.testing import chat
from tests.eve_cli.rt_support import DANGER_TOOL, call, reply, tool_file, write_agent
from world import open_world

GATED = tool_file(
    """
    import os, time
    from pathlib import Path

    def _record(label: str) -> None:
        with open(os.environ["TICKS"], "a") as f:
            f.write(label + "\\n")

    @tool
    def tick(label: str) -> str:
        \"\"\"A side effect: one line per run.\"\"\"
        _record(label)
        return "ticked " + label

    @tool
    def gated() -> str:
        \"\"\"Runs until the gate file exists (the test forks meanwhile).\"\"\"
        _record("gated")
        gate = Path(os.environ["TICKS"] + ".gate")
        for _ in range(600):
            if gate.exists():
                return "through"
            time.sleep(0.05)
        return "timed out"
    """
)
SCRIPT = [reply("", call("tick", label="a")), reply("", call("gated")), reply("all done")] * 2


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TICKS": str(tmp / "ticks")}


def _eve(tmp: Path, *args: str, faults: str = "") -> subprocess.CompletedProcess[str]:
    env = _env(tmp) | ({"EVE_FAULTS": faults} if faults else {})
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", *args], capture_output=True, text=True,
        env=env, timeout=60,
    )  # fmt: skip


def _ticks(tmp: Path) -> list[str]:
    path = tmp / "ticks"
    return path.read_text().split() if path.exists() else []


def _wait_for(check: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not callable(check) or not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_session_another_process_drives_forks_without_disturbing_it(
    world_spec: str, tmp_path: Path
) -> None:
    agent = write_agent(tmp_path / "agent", script=SCRIPT, tools={"tools": GATED})
    chat = subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "--world", world_spec, "chat", "--agent", str(agent),
         "--json"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(tmp_path),
    )  # fmt: skip
    try:
        assert chat.stdin is not None and chat.stdout is not None
        sid = json.loads(chat.stdout.readline())["sessionId"]
        chat.stdin.write("go\n")
        chat.stdin.flush()
        _wait_for(lambda: _ticks(tmp_path) == ["a", "gated"])  # the owner is inside the tool
        forked = _eve(tmp_path, "--world", world_spec, "fork", sid, "--json")
        assert forked.returncode == 0, forked.stderr
        out = json.loads(forked.stdout)
        assert out["forkedFrom"] == sid and out["checkpoint"] == "1.0"  # after tick a
        (tmp_path / "ticks.gate").touch()
        stdout, stderr = chat.communicate(timeout=60)
        assert chat.returncode == 0, stderr
        texts = [json.loads(line).get("text") for line in stdout.splitlines() if line.strip()]
        assert "all done" in texts  # the owner finished its turn as if nothing happened
    finally:
        if chat.poll() is None:
            chat.kill()
    resumed = _eve(tmp_path, "--world", world_spec, "resume", out["sessionId"])
    assert resumed.returncode == 0, resumed.stderr
    # The fork did not run tick a again; it asked the model on from there and ran `gated`.
    assert _ticks(tmp_path) == ["a", "gated", "gated"]
    shown = _eve(tmp_path, "--world", world_spec, "inspect", out["sessionId"], "--json")
    view = json.loads(shown.stdout)
    assert view["status"] == "waiting" and view["forkedFrom"]["session"] == sid
    assert [a["output"] for s in view["turns"][0]["steps"] for a in s["actions"]
            if a["kind"] == "tool"] == ["ticked a", "through"]  # fmt: skip


@pytest.mark.parametrize("fault", ["crash_before_write@1", "crash_after_fsync@1"])
def test_a_killed_fork_leaves_the_original_whole_and_no_half_session(
    world_spec: str, tmp_path: Path, fault: str
) -> None:
    agent = write_agent(tmp_path / "agent", script=[reply("one"), reply("two"), reply("two")])

    def runtime() -> Runtime:
        return Runtime(agent_dir=agent, world=open_world(world_spec))

    async def first() -> tuple[str, list[Event]]:
        rt = runtime()
        sid = await rt.create_session()
        await chat(rt, sid, "hi")
        events = rt.events(sid)
        rt.close()
        return sid, events

    sid, before = asyncio.run(first())
    killed = _eve(tmp_path, "--world", world_spec, "fork", sid, faults=fault)
    assert killed.returncode == -9, killed.stderr

    async def after() -> None:
        rt = runtime()
        rows = rt.sessions()  # a fork is whole or absent: every listed session reads
        assert all(row["status"] == "waiting" and rt.session(row["id"]) for row in rows)
        assert rt.events(sid) == before
        # Its id was listed before the fork was made: the original shows the fork if the kill
        # left it (a committed PostgreSQL creation), nothing if it came before.
        [listed] = rt.world.stream_read(forks_stream(sid))
        made = [row["id"] for row in rows if row["id"] != sid]
        assert made in ([], [listed["session"]])
        assert rt.lineage(sid)["forks"] == made
        new = (await rt.fork(sid))["sessionId"]
        assert rt.lineage(sid)["forks"] == sorted([*made, new])
        assert [s["text"] for s in (await chat(rt, new, "more"))["turns"][-1]["steps"]] == ["two"]
        assert [s["text"] for s in (await chat(rt, sid, "more"))["turns"][-1]["steps"]] == ["two"]
        rt.close()

    asyncio.run(after())


def test_a_fork_eve_fork_makes_and_eve_gc_removes_shows_in_a_running_runtimes_lineage(
    world_spec: str, tmp_path: Path
) -> None:
    script = [reply("one"), reply("", call("danger", x=1)), reply("two")]
    agent = write_agent(tmp_path / "agent", script=script, tools={"danger": DANGER_TOOL})

    async def go() -> None:
        rt = Runtime(agent_dir=agent, world=open_world(world_spec))  # as `eve start` serves
        sid = await rt.create_session()
        await chat(rt, sid, "hi")
        assert (await chat(rt, sid, "go"))["status"] == "parked"  # gc keeps it
        assert rt.lineage(sid)["forks"] == []
        forked = _eve(tmp_path, "--world", world_spec, "fork", sid, "--at", "1", "--json")
        assert forked.returncode == 0, forked.stderr
        new = json.loads(forked.stdout)["sessionId"]
        assert rt.lineage(sid)["forks"] == [new]
        gone = _eve(tmp_path, "--world", world_spec, "gc", "--older-than", "0s", "--waiting")
        assert gone.returncode == 0, gone.stderr
        assert rt.lineage(sid)["forks"] == [] and rt.session(sid)["status"] == "parked"
        rt.close()

    asyncio.run(go())
