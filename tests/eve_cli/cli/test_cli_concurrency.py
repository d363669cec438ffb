"""Two processes on one session: one owns it, the other is told (or waits with --wait); a
dead owner's lock is taken over at once. Real `eve chat` processes, killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eve_cli.execution._stored_events import EventReader
from tests.eve_cli.rt_support import call, reply, tool_file, write_agent
from world import LocalWorld

BLOCK = tool_file(
    """
    import os, sys, time
    from pathlib import Path

    @tool
    def block(ctx: ToolContext) -> str:
        \"\"\"Hold the session: the first run waits (a test kills its process meanwhile).\"\"\"
        marker = Path(os.environ["BLOCK_MARKER"])
        first = not marker.exists()
        marker.write_text("ran")
        if first:
            os.write(2, b"BLOCKING\\n")
            time.sleep(60)
        return "unblocked"
    """
)


@pytest.fixture
def agent(isolated: Path) -> Path:
    script = [reply("", call("block")), reply("first turn done"), reply("second turn done")]
    return write_agent(isolated / "agent", script=script, tools={"block": BLOCK})


def _eve(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "BLOCK_MARKER": str(Path.cwd() / "block-marker"), **(env_extra or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "eve_cli", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip


def _owner_in_tool(agent: Path) -> tuple[subprocess.Popen[str], str]:
    """An `eve chat` process inside the blocking tool: it owns the session."""
    owner = _eve("chat", "--agent", str(agent), "--json")
    assert owner.stdin is not None and owner.stdout is not None and owner.stderr is not None
    sid = json.loads(owner.stdout.readline())["sessionId"]
    owner.stdin.write("go\n")
    owner.stdin.flush()
    assert owner.stderr.readline().strip() == "BLOCKING"
    return owner, sid


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _finish(proc: subprocess.Popen[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = proc.communicate(stdin, timeout=90)
    return proc.returncode, out, err


def test_a_second_process_is_told_the_session_is_in_use_and_loses_nothing(agent: Path) -> None:
    owner, sid = _owner_in_tool(agent)
    try:
        code, _, err = _finish(_eve("chat", "-s", sid, "--agent", str(agent)), "also this\n")
        assert code == 1
        [line] = err.strip().splitlines()
        assert sid in line and "in use by another process" in line and "--wait" in line
    finally:
        _reap(owner)
    # The owner died mid-tool: the next process takes over at once (no --wait), finishes the
    # turn, and the message the refused process sent is there too.
    code, out, err = _finish(_eve("chat", "-s", sid, "--agent", str(agent), "--json"))
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["output"] for e in events if e["type"] == "action.result"] == ["unblocked"]
    # The refused process stopped before reading its input: nothing of it was half-taken.
    assert _all_received(sid) == ["go"]


def _all_received(sid: str) -> list[str | None]:
    world = LocalWorld(os.environ["EVE_DATA_DIR"])
    try:  # as readers see them (stored events refer to the history item for the text)
        events = EventReader(world, sid).read(0, world.stream_read(f"events.{sid}"))
    finally:
        world.close()
    return [e.get("text") for e in events if e.get("type") == "message.received"]


def test_wait_takes_over_the_moment_the_owner_dies(agent: Path) -> None:
    owner, sid = _owner_in_tool(agent)
    waiter = _eve("chat", "-s", sid, "--agent", str(agent), "--json", "--wait", "60")
    try:
        assert waiter.stdin is not None
        waiter.stdin.write("after\n")
        waiter.stdin.close()
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.wait(timeout=1.5)  # it waits for the owner, it does not fail
        owner.send_signal(signal.SIGKILL)
        owner.communicate()
        assert waiter.stdout is not None and waiter.stderr is not None
        out, err = waiter.stdout.read(), waiter.stderr.read()
        assert waiter.wait(timeout=60) == 0, err
    finally:
        _reap(owner)
        _reap(waiter)
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["output"] for e in events if e["type"] == "action.result"] == ["unblocked"]
    assert {"first turn done", "second turn done"} <= {
        e.get("text") for e in events if e["type"] == "message.completed"
    }
    assert _all_received(sid) == ["go", "after"]


def test_resume_refuses_or_waits_the_same_way(agent: Path) -> None:
    owner, sid = _owner_in_tool(agent)
    try:
        refused = subprocess.run(
            [sys.executable, "-m", "eve_cli", "resume", sid],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode == 1 and "owned by another process" in refused.stderr
        waiting = _eve("resume", sid, "--wait", "60")
        owner.send_signal(signal.SIGKILL)
        code, out, err = _finish(waiting)
        assert code == 0 and f"{sid}: waiting for the next message" in out, err
    finally:
        _reap(owner)
