"""A leased family's commits go through its write-ahead file (`world/stores/local/wal.py`):
the crash states a power cut may leave of it (tests/power_cut.py) — entries synced and the
journal and streams not, a torn tail, a cut in the middle of a checkpoint, an emptying the
cut undid — each open with every acknowledged step and its stream items exactly once."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.power_cut import Disk
from world import Engine, LocalWorld, WorkflowContext
from world.stores.local import wal as _wal

pytestmark = pytest.mark.slow  # crash states

STEPS = 6


def _flow(world: LocalWorld, disk: Disk | None, acks: list[tuple[int, int]]) -> Any:
    async def flow(ctx: WorkflowContext, _: Any) -> int:
        for i in range(STEPS):
            await ctx.step(f"s{i}", _effect(world, disk, acks, ctx.run_id), i)
            if i == STEPS // 2:
                await ctx.sleep(0)  # the run goes on in a second drive (a checkpoint between)
        return STEPS

    return flow


def _effect(world: LocalWorld, disk: Disk | None, acks: list[tuple[int, int]], rid: str) -> Any:
    def effect(i: int) -> int:
        if disk is not None:  # from here on, every step before i is durable with its item
            acks.append((disk.mark(f"step {i}"), i))
        world.stream_append(f"events.{rid}", {"i": i, "text": "x" * 300})
        return i

    return effect


def _workload(base: Path, disk: Disk) -> tuple[str, list[tuple[int, int]]]:
    acks: list[tuple[int, int]] = []
    world = LocalWorld(base / "data")
    engine = Engine(world, {"flow": _flow(world, disk, acks)})

    async def main() -> str:
        rid = await engine.start("flow", None)
        while (await engine.run(rid)).status != "completed":
            pass
        return rid

    rid = asyncio.run(main())
    world.close()
    disk.mark("end")
    return rid, acks


def _check(data: Path, rid: str, durable: int, where: str) -> None:
    world = LocalWorld(data)
    try:
        assert not [f for f in world.verify() if f.error], where
        done = [r for r in Engine(world, {}).history(rid) if r.get("t") == "step"]
        items = [item["i"] for item in world.stream_read(f"events.{rid}")]
        assert len(done) >= durable, f"{where}: an acknowledged step is gone"
        assert items[:durable] == list(range(durable)), f"{where}: {items}"
        acks: list[tuple[int, int]] = []
        engine = Engine(world, {"flow": _flow(world, None, acks)})
        while (info := asyncio.run(engine.run(rid))).status != "completed":
            pass
        assert info.result == STEPS, where
        items = [item["i"] for item in world.stream_read(f"events.{rid}")]
        assert items == list(range(STEPS)), f"{where}: each step's item once: {items}"
    finally:
        world.close()


def test_every_crash_state_of_the_commits_keeps_each_acknowledged_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "device"
    base.mkdir()
    disk = Disk(base)
    with monkeypatch.context() as patch:
        disk.install(patch)
        rid, acks = _workload(base, disk)
    wal_syncs = [m for m in disk.moments if _wal_has_entries(m)]
    assert len(wal_syncs) >= STEPS // 2, "no moment with commits in the write-ahead file"
    checked = 0
    for moment in disk.moments:
        for state, choice in disk.states(moment, 3, seed=32):
            target = tmp_path / "states" / f"{moment.number}-{state}"
            disk.build(moment, choice, target)
            durable = max((i for at, i in acks if at <= moment.number + 1), default=0)
            where = f"crash state {target.name} ({moment.label!r})"
            if (target / "data" / "runs" / rid / "journal.msgpack").exists():
                _check(target / "data", rid, durable, where)
                checked += 1
            else:
                assert not durable, f"{where}: the run is gone"
            shutil.rmtree(target)
    assert checked > len(disk.moments)


def _wal_has_entries(moment: Any) -> bool:
    return any(
        path.endswith(_wal.NAME) and _wal.parse(moment.durable.get(ino, b""))
        for path, (ino, _) in moment.files.items()
    )


def _commits(folder: Path, n: int) -> list[list[_wal.Op]]:
    wal = _wal.Wal(str(folder))
    ops = [[("j", "", 100 * i, bytes([i + 1]) * 40)] for i in range(n)]
    for op in ops:
        wal.commit(op)
    wal.close()
    return ops


def test_a_torn_tail_ends_the_entries_at_the_last_whole_one(tmp_path: Path) -> None:
    ops = _commits(tmp_path, 3)
    data = (tmp_path / _wal.NAME).read_bytes()
    data = data[: len(data.rstrip(b"\0"))]  # (space allocated ahead reads as zeros)
    whole = [len(_wal.parse(data[:cut])) for cut in range(len(data) + 1)]
    assert whole[-1] == 3 and whole == sorted(whole)  # never an entry past a torn one
    for cut in range(len(data)):
        assert _wal.parse(data[:cut]) == ops[: whole[cut]]
    zeroed = data[:-10] + bytes(10)  # a cut that kept the size, not the last block
    assert _wal.parse(zeroed) == ops[:2]
    flipped = bytearray(data)
    flipped[-5] ^= 1
    assert _wal.parse(bytes(flipped)) == ops[:2]


def test_entries_from_before_an_emptying_are_never_read_after_it(tmp_path: Path) -> None:
    wal = _wal.Wal(str(tmp_path))
    for i in range(3):
        wal.commit([("j", "", i, b"old")])
    wal.reset(give_back=False)  # a checkpoint in a long turn: the file reused in place
    wal.commit([("j", "", 7, b"new")])
    data = (tmp_path / _wal.NAME).read_bytes()
    assert b"old" in data  # the older entries are still there, after the new one
    assert _wal.parse(data) == [[("j", "", 7, b"new")]]
    wal.reset(give_back=True)
    wal.close()
    assert os.path.getsize(tmp_path / _wal.NAME) == 0


def test_a_replay_is_idempotent_and_makes_a_stream_cut_with_its_commit(tmp_path: Path) -> None:
    folder, streams = tmp_path / "runs" / "r", tmp_path / "streams"
    folder.mkdir(parents=True)
    streams.mkdir()
    (folder / "journal.msgpack").write_bytes(b"J" * 10)
    wal = _wal.Wal(str(folder))
    wal.commit([("s", "events.r.msgpack", 0, b"header+item"), ("j", "", 10, b"record")])
    wal.commit([("s", "gone.r.msgpack", 50, b"later")])  # a stream removed since
    wal.close()
    first = _wal.replay(str(folder), str(streams))
    assert (first.entries, first.changed) == (2, len(b"header+item") + len(b"record"))
    assert (folder / "journal.msgpack").read_bytes() == b"J" * 10 + b"record"
    assert (streams / "events.r.msgpack").read_bytes() == b"header+item"
    assert not (streams / "gone.r.msgpack").exists()
    assert os.path.getsize(folder / _wal.NAME) == 0
    # An emptying a cut undid: the same entries again change nothing.
    wal = _wal.Wal(str(folder))
    wal.commit([("s", "events.r.msgpack", 0, b"header+item"), ("j", "", 10, b"record")])
    wal.close()
    assert _wal.replay(str(folder), str(streams), dry_run=True).changed == 0
    assert _wal.replay(str(folder), str(streams)).changed == 0
    assert (folder / "journal.msgpack").read_bytes() == b"J" * 10 + b"record"


def test_a_replay_writes_nothing_over_bytes_another_writer_put_there(tmp_path: Path) -> None:
    # An eve without write-ahead files opened the family after a cut and appended where the
    # lost commit went: the entry is not this family's commit any more.
    folder, streams = tmp_path / "runs" / "r", tmp_path / "streams"
    folder.mkdir(parents=True)
    streams.mkdir()
    (folder / "journal.msgpack").write_bytes(b"J" * 10)
    wal = _wal.Wal(str(folder))
    wal.commit([("j", "", 10, b"lost record")])
    wal.commit([("j", "", 21, b"and another")])
    wal.close()
    (folder / "journal.msgpack").write_bytes(b"J" * 10 + b"older eve's record")
    done = _wal.replay(str(folder), str(streams))
    assert done.stale and done.entries == 2
    assert (folder / "journal.msgpack").read_bytes() == b"J" * 10 + b"older eve's record"
    assert os.path.getsize(folder / _wal.NAME) == 0


def test_an_item_appended_while_its_streams_commit_is_written_goes_after_it(
    tmp_path: Path,
) -> None:
    # A commit takes a family's open batches and writes them once its entry is synced; an
    # append to the same stream meanwhile (another thread) continues after them, under
    # the flock they hold, never where a resync from the file would put it (one offset).
    from world import _journal
    from world.stores.local.streams import StreamStore

    store = StreamStore(tmp_path / "streams")
    store.held = lambda root: root == "r"
    store.append("events.r", _journal.frame({"v": 0}))
    taken = store.take("r")
    store.append("events.r", _journal.frame({"v": 1}))  # while the commit syncs
    store.put(taken, stored=True)
    store.put(store.take("r"), stored=True)
    assert store.read("events.r") == [0, 1]
    store.close()
