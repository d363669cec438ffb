"""What a crash leaves in a family's write-ahead file (`world/stores/local/wal.py`: commits
synced there and not yet in the journal and stream files), as a later open meets it: a store
of format 2 migrated to 3, an eve that knows only format 2, a read-only reader."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from world import Engine, LocalWorld, StoreFormatError, WorkflowContext, _journal
from world.stores.local import layout
from world.stores.local import wal as _wal

STEPS = 5


def _flow(world: LocalWorld) -> Any:
    async def flow(ctx: WorkflowContext, n: int) -> int:
        for i in range(n):
            await ctx.step(f"s{i}", _effect(world, ctx.run_id), i)
        return n

    return flow


def _effect(world: LocalWorld, rid: str) -> Any:
    def effect(i: int) -> int:
        world.stream_append(f"events.{rid}", {"i": i})
        return i

    return effect


def _crashed(data: Path, cut: int) -> tuple[str, list[str]]:
    """A store whose family's last `cut` journal records (the steps' and the end's) and last
    stream items are in its write-ahead file alone, as a cut after their commit leaves it
    (the entry synced, the journal's and the stream's writes lost). The run id and every
    step it took."""
    world = LocalWorld(data)
    engine = Engine(world, {"steps": _flow(world)})
    rid = asyncio.run(engine.start("steps", STEPS, run_id="fixed"))
    asyncio.run(engine.run(rid))
    names = [r["name"] for r in engine.history(rid) if r.get("t") == "step"]
    world.close()
    assert len(names) == STEPS
    journal = data / "runs" / rid / "journal.msgpack"
    read = _journal.read_file(str(journal))
    at = read.records[-cut][0]
    whole = journal.read_bytes()
    ops: list[_wal.Op] = [("j", "", at, whole[at : read.end])]
    stream = data / "streams" / f"events.{rid}.msgpack"
    items = stream.read_bytes()
    last = items.rindex(_journal.frame({"v": {"i": STEPS - 1}}, "stream item"))
    ops.append(("s", stream.name, last, items[last:]))
    wal = _wal.Wal(str(data / "runs" / rid))
    wal.commit(ops)
    wal.close()
    os.truncate(journal, at)
    os.truncate(stream, last)
    return rid, names


def _steps_seen(world: LocalWorld, rid: str) -> list[str]:
    return [r["name"] for r in Engine(world, {}).history(rid) if r.get("t") == "step"]


def _set_version(data: Path, version: int) -> None:
    fmt = data / "FORMAT"
    found = json.loads(fmt.read_text())
    fmt.write_text(json.dumps({**found, "version": version}) + "\n")


def test_a_format_2_store_with_commits_in_a_write_ahead_file_opens_with_every_one(
    tmp_path: Path,
) -> None:
    # Format 2 -> 3 rewrites nothing: what the file holds is replayed after the migration.
    data = tmp_path / "data"
    rid, names = _crashed(data, 3)
    _set_version(data, 2)
    wal = (data / "runs" / rid / _wal.NAME).read_bytes()
    world = LocalWorld(data)
    try:
        assert world.migration is not None
        assert str(world.migration).startswith(f"{data}: migrated store format 2 -> 3: 1 run")
        assert (data / "runs" / rid / _wal.NAME).read_bytes() == wal  # left as it was
        assert json.loads((data / "FORMAT").read_text())["version"] == 3
        assert _steps_seen(world, rid) == names
        assert [item["i"] for item in world.stream_read(f"events.{rid}")] == list(range(STEPS))
        assert Engine(world, {}).info(rid).status == "completed"
    finally:
        world.close()
    assert LocalWorld(data).migration is None  # once


def test_an_eve_that_knows_only_format_2_refuses_a_format_3_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    _crashed(data, 2)
    before = {str(p): p.read_bytes() for p in data.rglob("*") if p.is_file()}
    monkeypatch.setattr(layout, "FORMAT_VERSION", 2)  # the version check of an eve before 3
    monkeypatch.setattr(layout, "FORMAT", {"format": "eve-world", "version": 2})
    for create in (True, False):
        with pytest.raises(StoreFormatError) as err:
            LocalWorld(data, create=create)
        message = str(err.value)
        assert "written by a newer eve (version 3; this one reads 2)" in message, message
    assert {str(p): p.read_bytes() for p in data.rglob("*") if p.is_file()} == before


def test_a_reader_reads_a_format_2_store_as_it_is(tmp_path: Path) -> None:
    # Its files are format 3's: a reader (`eve inspect`) migrates nothing, writes nothing.
    data = tmp_path / "data"
    rid, names = _crashed(data, 1)
    LocalWorld(data).close()  # (replayed)
    _set_version(data, 2)
    before = {str(p): p.read_bytes() for p in data.rglob("*") if p.is_file()}
    reader = LocalWorld(data, create=False)
    assert reader.migration is None and _steps_seen(reader, rid) == names
    reader.close()
    assert {str(p): p.read_bytes() for p in data.rglob("*") if p.is_file()} == before


JOB = """
import asyncio, sys
from world import Engine, LocalWorld, WorkflowContext

world = LocalWorld(sys.argv[1])

def effect(i):
    world.stream_append("events.job", {"i": i})
    return i

async def job(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.step(f"s{i}", effect, i)
    return n

async def main():
    engine = Engine(world, {"job": job})
    await engine.start("job", 10, run_id="job")
    await engine.run("job")

asyncio.run(main())
"""


def _files(data: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in data.rglob("*") if p.is_file()}


@pytest.mark.parametrize("n", [3, 6])
def test_a_reader_sees_every_commit_a_killed_writer_left_in_its_write_ahead_file(
    tmp_path: Path, n: int
) -> None:
    """SIGKILL right after a commit's entry is synced, before its records and items are
    written into the journal and the stream: a reader (`eve inspect`) reads them through the
    write-ahead file, writing nothing, as a writer's replay then stores them."""
    data, script = tmp_path / "data", tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, EVE_FAULTS=f"crash_after_fsync@{n}")
    done = subprocess.run([sys.executable, str(script), str(data)], env=env, timeout=60)
    assert done.returncode == -signal.SIGKILL
    folder = data / "runs" / "job"
    assert _wal.missing(str(folder), str(data / "streams")), "no commit left in the file alone"
    before = _files(data)
    reader = LocalWorld(data, create=False)
    seen = (_steps_seen(reader, "job"), reader.stream_read("events.job"))
    assert reader.stream_length("events.job") == len(seen[1])
    reader.close()
    assert _files(data) == before  # read through, nothing written
    writer = LocalWorld(data)  # replays the file
    try:
        stored = (_steps_seen(writer, "job"), writer.stream_read("events.job"))
    finally:
        writer.close()
    assert not _wal.missing(str(folder), str(data / "streams"))
    assert seen == stored
    assert stored[0][-1] == f"s{len(stored[1]) - 1}"  # the last step, with its item


@pytest.mark.parametrize("fault", ["crash_migrate_staged@1", "crash_migrate_committed"])
def test_a_migration_from_format_2_killed_leaves_format_2_or_3_and_loses_nothing(
    tmp_path: Path, fault: str
) -> None:
    data = tmp_path / "data"
    rid, names = _crashed(data, 2)
    _set_version(data, 2)
    opening = f"from world import LocalWorld; LocalWorld({str(data)!r}).close()"
    env = dict(os.environ, EVE_FAULTS=fault)
    killed = subprocess.run([sys.executable, "-c", opening], env=env, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    version = json.loads((data / "FORMAT").read_text())["version"]
    assert version == 2 or (version == 3 and fault == "crash_migrate_committed")
    world = LocalWorld(data)  # finishes it, or migrates again
    try:
        assert json.loads((data / "FORMAT").read_text())["version"] == 3
        assert not (data / ".migrating").exists()
        assert _steps_seen(world, rid) == names
        assert [item["i"] for item in world.stream_read(f"events.{rid}")] == list(range(STEPS))
    finally:
        world.close()
