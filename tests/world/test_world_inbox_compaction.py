"""Consumed deliveries leave the inbox (inbox version 3): ids stay, replays still find theirs,
and a kill at any point of a compaction leaves a readable inbox with every delivery kept."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import filelock
import pytest

from world import Engine, LocalWorld, WorkflowContext, _journal
from world.stores.local import verify as _verify
from world.stores.local import world as local

PAYLOAD = "x" * 1000
TOKEN = "0a1b2c3d"


async def _loop(ctx: WorkflowContext, n: int) -> int:
    """One delivery per generation, as a session's turns: the inbox floor moves on."""
    hook = ctx.create_hook(TOKEN) if n == 0 else ctx.hook(TOKEN)
    if await hook.receive() == "stop":
        return n
    ctx.continue_as_new(n + 1)
    return -1


async def _collect(ctx: WorkflowContext, n: int) -> list[Any]:
    """Every delivery in one generation: none may leave while it is unfinished."""
    hook = ctx.create_hook(TOKEN)
    return [await hook.receive() for _ in range(n)]


def _header(inbox: Path) -> dict[str, Any]:
    return _journal.read_file(str(inbox)).records[0][1]


def _deliver_and_run(engine: Engine, rid: str, payload: Any) -> int:
    asyncio.run(engine.resume_hook(TOKEN, payload))
    asyncio.run(engine.run(rid))
    return engine.world.inbox_end(rid)


def test_consumed_deliveries_leave_the_inbox_and_ids_do_not_move(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    engine = Engine(LocalWorld(folder), {"loop": _loop})
    rid = asyncio.run(engine.start("loop", 0, run_id="loop"))
    asyncio.run(engine.run(rid))
    inbox = folder / "runs" / rid / "inbox.msgpack"
    ends = [_deliver_and_run(engine, rid, PAYLOAD) for _ in range(60)]
    assert "base" in _header(inbox) and _header(inbox)["version"] == 3
    assert inbox.stat().st_size < ends[-1] // 2  # ~60 KB delivered, most of it gone
    # Ids are offsets in the never-compacted file: the next one is the end seen before.
    world = LocalWorld(folder)
    assert world.inbox_end(rid) == ends[-1]
    assert world.deliver(rid, TOKEN, "stop") == ends[-1]
    items, end = world.read_inbox(rid)
    assert items[0].id >= _header(inbox)["base"] and items[-1].payload == "stop"
    assert world.read_inbox(rid, items[-1].id)[0] == items[-1:] and end > ends[-1]
    # A new process replays the current generation (its delivery is kept) and finishes.
    info = asyncio.run(Engine(LocalWorld(folder), {"loop": _loop}).run(rid))
    assert (info.status, info.result) == ("completed", 60)
    assert not [f for f in _verify.verify(folder) if not f.ok]
    # The journal's log still reads; receptions of dropped deliveries say which they were.
    recvs = [r for r in Engine(LocalWorld(folder), {}).history(rid) if r["t"] == "recv"]
    assert len(recvs) == 61 and recvs[-1]["values"] == ["stop"] and "lost" in recvs[0]


def test_an_unfinished_generation_keeps_every_delivery_it_received(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    engine = Engine(LocalWorld(folder), {"collect": _collect})
    rid = asyncio.run(engine.start("collect", 40, run_id="collect"))
    asyncio.run(engine.run(rid))
    for i in range(39):
        _deliver_and_run(engine, rid, f"{i}{PAYLOAD}")
    inbox = folder / "runs" / rid / "inbox.msgpack"
    assert "base" not in _header(inbox) and inbox.stat().st_size > 39_000
    asyncio.run(engine.resume_hook(TOKEN, "last"))
    info = asyncio.run(Engine(LocalWorld(folder), {"collect": _collect}).run(rid))
    assert info.result == [f"{i}{PAYLOAD}" for i in range(39)] + ["last"]


def test_compaction_keeps_what_is_not_worth_dropping_or_not_a_record_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "data"
    engine = Engine(LocalWorld(folder), {"collect": _collect})
    rid = asyncio.run(engine.start("collect", 99, run_id="unit"))
    world = LocalWorld(folder)
    ids = [world.deliver(rid, TOKEN, PAYLOAD) for _ in range(30)]
    inbox = folder / "runs" / rid / "inbox.msgpack"
    before = inbox.read_bytes()
    assert not world.compact_inbox(rid, ids[3])  # < COMPACT_MIN
    assert not world.compact_inbox(rid, ids[20] + 1)  # inside a record
    assert not world.compact_inbox(rid, ids[-1] + 10**6)  # beyond the end
    monkeypatch.setattr(local, "COMPACT_MIN", 1000)
    assert not world.compact_inbox(rid, ids[10])  # fewer dropped than kept
    with filelock.FileLock(str(folder / "runs" / rid / "inbox.lock")):
        assert not world.compact_inbox(rid, ids[20])  # busy: skipped, the drive goes on
    assert inbox.read_bytes() == before
    assert world.compact_inbox(rid, ids[20])
    assert world.compact_inbox(rid, ids[26])  # again, from a compacted file
    assert _header(inbox)["base"] == ids[26]
    fresh = LocalWorld(folder)
    items, _ = fresh.read_inbox(rid, ids[5])  # from a dropped id: what is left
    assert [i.id for i in items] == ids[26:]
    assert fresh.read_inbox(rid, ids[28])[0][0].id == ids[28]
    assert fresh.inbox_end(rid) == world.inbox_end(rid) == len(before)
    assert fresh.deliver(rid, TOKEN, "more") == len(before)


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[3])
    from test_world_inbox_compaction import PAYLOAD, TOKEN, _loop
    from world import Engine, LocalWorld

    data, log = sys.argv[1], sys.argv[2]

    async def main():
        engine = Engine(LocalWorld(data), {"loop": _loop})
        if not engine.world.families():
            await engine.run(await engine.start("loop", 0, run_id="killed"))
        if sys.argv[4] == "stop":
            await engine.resume_hook(TOKEN, "stop")
            print((await engine.run("killed")).result)
            return
        for i in range(40):
            await engine.resume_hook(TOKEN, PAYLOAD)
            with open(log, "a") as f:
                f.write("delivered\\n")
            await engine.run("killed")

    asyncio.run(main())
    """
)
REPO = Path(__file__).absolute().parents[2]


def _script(tmp: Path, faults: str, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp / "compact.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "EVE_FAULTS": faults, "PYTHONPATH": str(REPO)}
    args = [str(tmp / "data"), str(tmp / "log"), str(Path(__file__).parent), mode]
    return subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("fault", ["crash_compact_written@1", "crash_compact_renamed@1"])
def test_a_kill_during_compaction_loses_no_delivery(tmp_path: Path, fault: str) -> None:
    killed = _script(tmp_path, fault, "go")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    delivered = len((tmp_path / "log").read_text().split())
    assert 15 < delivered < 40  # killed at the first compaction, after a 16 KiB prefix
    inbox = tmp_path / "data" / "runs" / "killed" / "inbox.msgpack"
    assert ("base" in _header(inbox)) == fault.startswith("crash_compact_renamed")
    found = [f for f in _verify.verify(tmp_path / "data") if not f.ok]
    assert [f.kind for f in found] == (["temp"] if "written" in fault else [])
    assert not [f for f in _verify.repair(tmp_path / "data") if f.error]
    resumed = _script(tmp_path, "", "stop")
    assert (resumed.returncode, resumed.stdout.strip()) == (0, str(delivered)), resumed.stderr
    assert not [f for f in _verify.verify(tmp_path / "data") if not f.ok]
