"""The sleep tool from the command line: `eve chat` waits through a sleep and goes on when it
is due; `eve resume --all` drives a session whose sleep came due while nothing ran."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from eve_cli.runtime import Runtime
from tests.eve_cli.cli.cli_helpers import Eve, data_dir
from tests.eve_cli.rt_support import call, reply, write_agent


def sleeper(root: Path, seconds: float) -> Path:
    script = [reply("", call("sleep", seconds=seconds)), reply("awake now")]
    return write_agent(root, script=script, agent_args="sleep=True")


def test_chat_waits_through_a_sleep(eve: Eve, tmp_path: Path) -> None:
    agent = sleeper(tmp_path / "agent", 0.8)
    began = time.monotonic()
    result = eve("chat", "--agent", str(agent), "-p", "nap")
    assert result.exit_code == 0, result.output
    assert time.monotonic() - began >= 0.75
    assert "sleeping until " in result.stderr and result.stdout.strip() == "awake now"


def test_resume_all_drives_a_sleep_that_came_due_while_nothing_ran(
    eve: Eve, tmp_path: Path
) -> None:
    agent = sleeper(tmp_path / "agent", 1.0)
    rt = Runtime(data_dir=data_dir(), agent_dir=agent)
    sid = asyncio.run(rt.create_session())
    asyncio.run(rt.deliver(sid, "nap"))
    assert asyncio.run(rt.drive(sid))["parkedOn"] == "sleep"
    due = rt.timers()[sid]
    rt.close()
    nothing = eve("resume", "--all")
    assert nothing.exit_code == 0 and sid not in nothing.stdout  # not due yet
    time.sleep(max(due + 0.05 - time.time(), 0))
    done = eve("resume", "--all")
    assert done.exit_code == 0, done.output
    assert f"{sid}: waiting for the next message" in done.stdout
