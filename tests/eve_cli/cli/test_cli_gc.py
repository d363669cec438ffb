"""`eve gc`: ended sessions older than a duration go, nothing else does; size stays bounded."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import filelock
import pytest
from typer.testing import CliRunner

from eve_cli._retention import FINISHED, _remove, collect, collecting_runtime, parse_duration
from eve_cli.cli.app import app
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import DANGER_TOOL as DANGER
from tests.eve_cli.rt_support import call, reply, tool_file, write_agent
from world import LocalWorld, RunNotFoundError, verify

runner = CliRunner()


def _make(data: Path, agent: Path, mode: str, message: str) -> str:
    async def main() -> str:
        rt = Runtime(data, agent_dir=agent)
        sid = await rt.create_session(mode=mode)
        await rt.deliver(sid, message)
        await rt.drive(sid)
        rt.close()
        return sid

    return asyncio.run(main())


@pytest.fixture
def sessions(isolated: Path) -> dict[str, str]:
    """One session in each state, by status."""
    data = isolated / "data"
    done = write_agent(isolated / "done", script=[reply("all done")])
    broken = write_agent(isolated / "broken", script=[])  # exhausted at once: the task fails
    asks = write_agent(isolated / "asks", script=[reply("", call("danger", x=1))],
                       tools={"danger": DANGER})  # fmt: skip
    made = {
        "completed": _make(data, done, "task", "go"),
        "failed": _make(data, broken, "task", "go"),
        "waiting": _make(data, done, "conversation", "hi"),
        "parked": _make(data, asks, "conversation", "do it"),
    }
    rt = Runtime(data, agent_dir=done)
    assert {k: rt.session(v)["status"] for k, v in made.items()} == {k: k for k in made}
    rt.close()
    return made


def _age(data: Path, seconds: float) -> None:
    """Make every file look last written `seconds` ago."""
    then = time.time() - seconds
    for path in data.rglob("*"):
        os.utime(path, (then, then))


def _gc(data: Path, *args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["gc", "--data", str(data), "--json", *args])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _owned_files(data: Path, sid: str) -> list[Path]:
    return [p for p in data.rglob("*") if p.is_file() and sid in (p.name + p.parent.name)]


def _sizes(data: Path) -> tuple[int, int]:
    files = [p for p in data.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def test_durations() -> None:
    assert parse_duration("90s") == 90 and parse_duration("30m") == 1800
    assert parse_duration("7d") == 7 * 86400 and parse_duration("1h30m") == 5400
    for bad in ("", "7", "7x", "d7", "1h 2m", "-1d"):
        result = runner.invoke(app, ["gc", "--older-than", bad])
        assert result.exit_code == 2 and "invalid duration" in result.stderr


def test_young_sessions_stay(isolated: Path, sessions: dict[str, str]) -> None:
    report = _gc(isolated / "data", "--older-than", "1h", "--force", "--waiting")
    assert report["entries"] == [] and report["bytesFreed"] == 0


def test_only_ended_sessions_go_and_the_bytes_are_counted(
    isolated: Path, sessions: dict[str, str]
) -> None:
    data = isolated / "data"
    _age(data, 3 * 3600)
    ended = [sessions["completed"], sessions["failed"]]
    expected = sum(p.stat().st_size for sid in ended for p in _owned_files(data, sid))
    before = _sizes(data)

    dry = _gc(data, "--older-than", "2h", "--dry-run")
    assert _sizes(data) == before  # nothing touched
    assert dry["bytesToFree"] == expected and dry["bytesFreed"] == 0

    report = _gc(data, "--older-than", "2h")
    actions = {e["id"]: e["action"] for e in report["entries"]}
    assert actions == {
        sessions["completed"]: "removed",
        sessions["failed"]: "removed",
        sessions["waiting"]: "skipped: waiting (use --waiting)",
        sessions["parked"]: "skipped: parked (use --force)",
    }
    assert report["bytesFreed"] == expected > 0
    assert _sizes(data)[1] == before[1] - expected
    for sid in ended:
        assert _owned_files(data, sid) == []
    rt = Runtime(data)
    assert {r["id"] for r in rt.sessions()} == {sessions["waiting"], sessions["parked"]}
    assert rt.session(sessions["parked"])["pending"]  # still answerable
    rt.close()
    assert not [f for f in verify(data) if not f.ok]

    _gc(data, "--older-than", "2h", "--waiting")
    assert _owned_files(data, sessions["waiting"]) == []
    assert _owned_files(data, sessions["parked"])
    _gc(data, "--older-than", "2h", "--force")
    assert [p for p in data.rglob("*") if p.is_file()] == [data / "FORMAT"]


def test_a_session_owned_by_a_live_process_is_never_removed(
    isolated: Path, sessions: dict[str, str]
) -> None:
    data, sid = isolated / "data", sessions["completed"]
    _age(data, 3600)
    with subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from world import LocalWorld; w = LocalWorld(sys.argv[1]); "
         "lease = w.acquire(sys.argv[2]); print('held', flush=True); sys.stdin.read()",
         str(data), sid],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as holder:  # fmt: skip
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        report = _gc(data, "--older-than", "1m", "--force", "--waiting")
        holder.kill()
    actions = {e["id"]: e["action"] for e in report["entries"]}
    assert actions[sid] == "skipped: owned by a live process"
    assert (data / "runs" / sid / "journal.msgpack").exists()
    assert sum(a == "removed" for a in actions.values()) == 3
    # The owner is gone now: its lock is free, the next gc takes the session.
    again = _gc(data, "--older-than", "1m")
    assert [(e["id"], e["action"]) for e in again["entries"]] == [(sid, "removed")]


BLOCK = tool_file(
    """
    import os, time

    @tool
    def block() -> str:
        \"\"\"Blocks until killed.\"\"\"
        open(os.environ["GC_MARK"], "w").close()
        time.sleep(120)
        return "never"
    """
)


def test_running_owned_and_interrupted_sessions(isolated: Path) -> None:
    """Running under a live process: never removed, even with --force. Once that process
    is SIGKILLed the turn is interrupted and the lock free: removed only with --force."""
    data, mark = isolated / "data", isolated / "in-tool"
    agent = write_agent(isolated / "agent", script=[reply("", call("block"))],
                        tools={"block": BLOCK})  # fmt: skip
    env = {**os.environ, "GC_MARK": str(mark), "EVE_DATA_DIR": str(data)}
    with subprocess.Popen(
        [sys.executable, "-m", "eve_cli", "chat", "--agent", str(agent), "--json"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=env,
    ) as proc:  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        sid = json.loads(proc.stdout.readline())["sessionId"]
        deadline = time.monotonic() + 60
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), "the tool never started"
        _age(data, 3600)
        live = _gc(data, "--older-than", "1m", "--force", "--waiting")
        proc.kill()
    assert [(e["status"], e["action"]) for e in live["entries"]] == [
        ("running", "skipped: owned by a live process")
    ]
    _age(data, 3600)
    plain = _gc(data, "--older-than", "1m", "--waiting")
    assert [(e["status"], e["action"]) for e in plain["entries"]] == [
        ("interrupted", "skipped: interrupted (use --force)")
    ]
    forced = _gc(data, "--older-than", "1m", "--force")
    assert [(e["id"], e["action"]) for e in forced["entries"]] == [(sid, "removed")]
    assert _owned_files(data, sid) == [] and not (data / "runs" / sid).exists()


def test_a_session_that_changed_after_the_listing_is_kept(
    isolated: Path, sessions: dict[str, str]
) -> None:
    """gc decides again under the session's locks: a message delivered since it looked
    keeps the session (and the message)."""
    data, sid = isolated / "data", sessions["waiting"]
    _age(data, 3600)
    cutoff, allowed = time.time() - 60, {*FINISHED, "waiting"}
    reader = collecting_runtime(data)
    try:
        listed = collect(reader, cutoff, allowed, dry_run=True)
    finally:
        reader.close()
    [entry] = [e for e in listed if e.id == sid]
    assert entry.action == "would remove"
    rt = Runtime(data)
    asyncio.run(rt.deliver(sid, "still here"))
    try:
        assert _remove(rt, entry, cutoff, allowed) == (
            "skipped: changed while gc ran (now waiting)"
        )
    finally:
        rt.close()
    assert LocalWorld(data).read_inbox(sid)[0][-1].payload == {"m": "still here"}


def test_a_message_no_drive_took_keeps_its_session_however_old(
    isolated: Path, sessions: dict[str, str]
) -> None:
    """A message acknowledged to its sender that no drive took yet (its server down since)
    keeps a waiting session past any age, in a dry run too; once a drive took it, gc may
    remove the session."""
    data, sid = isolated / "data", sessions["waiting"]
    rt = Runtime(data, agent_dir=isolated / "done")
    try:
        asyncio.run(rt.deliver(sid, "are you there?"))
        _age(data, 3600)
        for dry in (["--dry-run"], []):
            report = _gc(data, "--older-than", "1m", "--waiting", *dry)
            actions = {e["id"]: e["action"] for e in report["entries"]}
            assert actions[sid] == "skipped: a delivery waits for the session"
        assert LocalWorld(data).read_inbox(sid)[0][-1].payload == {"m": "are you there?"}
        asyncio.run(rt.drive(sid))
        assert any(e.get("text") == "are you there?" for e in rt.events(sid))
    finally:
        rt.close()
    _age(data, 3600)
    report = _gc(data, "--older-than", "1m", "--waiting")
    assert {e["id"]: e["action"] for e in report["entries"]}[sid] == "removed"


def test_a_message_delivered_as_gc_decides_keeps_its_session_on_every_world(
    isolated: Path, world_spec: str
) -> None:
    """The race `eve gc` ran on PostgreSQL, made in order: gc lists a waiting session as idle,
    a message is delivered (acknowledged to its sender), no drive takes it (the server's
    found gc holding the lease), and gc decides under the lease: the session stays, and
    takes the message at its next drive."""
    agent = write_agent(isolated / "agent", script=[reply("hello"), reply("again")])
    rt = Runtime(world_spec, agent_dir=agent)
    try:

        async def made() -> str:
            sid = await rt.create_session()
            await rt.deliver(sid, "hi")
            await rt.drive(sid)
            return sid

        sid = asyncio.run(made())
        cutoff, allowed = time.time() + 60, {*FINISHED, "waiting"}  # any session is idle
        reader = collecting_runtime(world_spec)
        try:
            [entry] = [e for e in collect(reader, cutoff, allowed, dry_run=True) if e.id == sid]
        finally:
            reader.close()
        assert entry.action == "would remove"
        asyncio.run(rt.deliver(sid, "still here"))
        assert _remove(rt, entry, cutoff, allowed) == "skipped: a delivery waits for the session"
        asyncio.run(rt.drive(sid))
        assert [e["text"] for e in rt.events(sid) if e["type"] == "message.received"] == [
            "hi",
            "still here",
        ]
    finally:
        rt.close()


def test_a_process_waiting_for_a_session_gc_removes_finds_no_session(
    isolated: Path, sessions: dict[str, str]
) -> None:
    """A process that waits for the lease while gc removes the session gets a clear "no
    session" instead of running a half-removed one; a delivery racing the removal either
    lands first (and the session stays, with it) or finds no session — never both lost."""
    data, sid = isolated / "data", sessions["waiting"]
    gc_world, waiter = LocalWorld(data), LocalWorld(data)
    lease = gc_world.acquire(sid)
    mark = gc_world.inbox_end(sid)
    inbox = filelock.FileLock(str(data / "runs" / sid / "inbox.lock"), preserve_lock_file=True)
    inbox.acquire()
    with ThreadPoolExecutor(3) as pool:
        owner = pool.submit(waiter.acquire, sid, 30.0)
        delivery = pool.submit(waiter.deliver, sid, "tok", {"kind": "message", "text": "x"})
        removal = pool.submit(gc_world.remove_family, sid, inbox_mark=mark)
        time.sleep(0.5)  # all three wait on the locks held here
        inbox.release()  # the removal or the delivery goes first
        removed = removal.result(timeout=60)
        if removed:
            with pytest.raises(RunNotFoundError):
                delivery.result(timeout=60)
        else:  # the delivery won: it is kept, and nothing was removed
            assert delivery.result(timeout=60) >= mark
            assert waiter.read_inbox(sid)[0][-1].payload == {"kind": "message", "text": "x"}
            assert gc_world.remove_family(sid, inbox_mark=gc_world.inbox_end(sid))
        lease.release()
        with pytest.raises(RunNotFoundError):
            owner.result(timeout=60)
    assert not (data / "runs" / sid / "journal.msgpack").exists()
    assert not gc_world.family_exists(sid) and gc_world.remnants() == []


def test_leftovers_of_an_interrupted_removal_are_swept(
    isolated: Path, sessions: dict[str, str]
) -> None:
    data, sid = isolated / "data", sessions["completed"]
    (data / "runs" / sid / "journal.msgpack").unlink()  # a gc killed half way
    (data / "streams" / "events.s_gone.msgpack").write_bytes(b"x" * 10)  # orphan stream
    _age(data, 3600)
    report = _gc(data, "--older-than", "1m")
    swept = {e["id"]: (e["status"], e["action"]) for e in report["entries"]}
    assert swept[sid] == ("leftover", "removed") and swept["s_gone"] == ("leftover", "removed")
    assert _owned_files(data, sid) == [] and not (data / "runs" / sid).exists()


def test_a_remnant_a_creator_just_left_is_not_idle(
    isolated: Path, sessions: dict[str, str]
) -> None:
    """A run folder holding only a lock, as a creator killed a moment ago leaves it (or one
    creating it now): its age is its folder's, not the epoch's, so a retention or gc by age
    leaves it to the creator that may be making it this moment."""
    data = isolated / "data"
    folder = data / "runs" / "s_being_made"
    folder.mkdir(parents=True)
    (folder / "inbox.lock").write_bytes(b"")
    report = _gc(data, "--older-than", "1m")
    assert "s_being_made" not in {e["id"] for e in report["entries"]}
    assert folder.exists()
    _age(data, 3600)  # an hour later it is a leftover like any
    swept = {e["id"]: e["action"] for e in _gc(data, "--older-than", "1m")["entries"]}
    assert swept["s_being_made"] == "removed" and not folder.exists()


@pytest.mark.slow
def test_soak_size_and_file_count_stay_bounded(isolated: Path) -> None:
    """Many short sessions with gc between them: the directory does not grow with history."""
    data = isolated / "data"
    add = tool_file('@tool\ndef add(a: int, b: int) -> int:\n    """Add."""\n    return a + b\n')
    script = [reply("", call("add", a=1, b=2)), reply("3")]
    agent = write_agent(isolated / "agent", script=script, tools={"add": add})
    peaks: list[tuple[int, int]] = []

    async def batch(rt: Runtime, n: int) -> None:
        for _ in range(n):
            sid = await rt.create_session(mode="task")
            await rt.deliver(sid, "add 1 and 2")
            assert (await rt.drive(sid))["status"] == "completed"

    for _ in range(12):
        rt = Runtime(data, agent_dir=agent)
        asyncio.run(batch(rt, 5))
        rt.close()
        peaks.append(_sizes(data))
        report = _gc(data, "--older-than", "0s")
        assert sum(e["action"] == "removed" for e in report["entries"]) == 5
        assert _sizes(data) == (1, (data / "FORMAT").stat().st_size)
    # Each batch peaks at the same size: nothing accumulates across 60 sessions.
    counts = {count for count, _ in peaks}
    sizes = [size for _, size in peaks]
    assert len(counts) == 1 and max(sizes) - min(sizes) < 0.05 * max(sizes), peaks


def test_eve_start_keeps_what_its_retention_keeps_and_removes_the_rest(
    isolated: Path, sessions: dict[str, str]
) -> None:
    """A real `eve start` removes, at start-up, the sessions idle past its retention (ended
    ones, and those waiting for their next message) and keeps one waiting for an answer; a
    fresh session and a server with retention off keep everything."""
    data = isolated / "data"
    _age(data, 3 * 3600)
    fresh = _make(data, isolated / "done", "conversation", "new")

    def serve(*args: str, wait_for: str | None, env: dict[str, str] | None = None) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eve_cli", "start", "--port", "0", "--data", str(data),
             "--agent", str(isolated / "done"), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        try:
            assert "serving" in proc.stdout.readline()
            if wait_for is None:  # time for a retention run that must not happen
                time.sleep(1.5)
                return ""
            for line in proc.stderr:
                if wait_for in line:
                    return line
            raise AssertionError("the server ended without saying so")
        finally:
            proc.terminate()
            proc.communicate(timeout=60)

    serve("--retention", "off", wait_for=None, env={**os.environ, "EVE_RETENTION": "2h"})
    assert len(LocalWorld(data).families()) == 5
    said = serve("--retention", "2h", wait_for="retention:")
    assert "removed 3 session(s) idle over 2h" in said
    left = set(LocalWorld(data).families())
    assert left == {sessions["parked"], fresh}
    assert not (data / "runs" / sessions["completed"]).exists()
    bad = subprocess.run(
        [sys.executable, "-m", "eve_cli", "start", "--port", "0", "--data", str(data)],
        env={**os.environ, "EVE_RETENTION": "forever"}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "EVE_RETENTION" in bad.stderr
