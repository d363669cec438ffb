"""LocalWorld's record of each family's streams (`runs/<root>/streams.list`): what names a
family's streams for the damage check before a write, so waking one of many parked sessions
does not list every stream of the store, and what a kill or a power cut may leave of it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tests.power_cut import Disk
from world import CorruptJournalError, Engine, LocalWorld, WorkflowContext, repair, verify

RECORD = "streams.list"


def _flows(world: LocalWorld) -> dict[str, Any]:
    async def parks(ctx: WorkflowContext, token: str) -> Any:
        await ctx.step("emit", world.stream_append, f"events.{ctx.run_id}", {"hello": token})
        await ctx.step("keep", world.stream_append, f"history.{ctx.run_id}", {"n": 1})
        value = await ctx.create_hook(token).receive()
        await ctx.step("tool", world.stream_append, f"tools.{ctx.run_id}.1", {"got": value})
        return value

    return {"parks": parks}


def _park(data: Path, root: str) -> None:
    world = LocalWorld(data)
    engine = Engine(world, _flows(world))

    async def go() -> None:
        await engine.start("parks", f"tok-{root}", run_id=root)
        assert (await engine.run(root)).status == "parked"

    asyncio.run(go())
    world.stream_append("forks:" + root, "belongs to no family")
    world.close()


def _wake(data: Path, root: str) -> str:
    world = LocalWorld(data)
    engine = Engine(world, _flows(world))

    async def go() -> str:
        await engine.resume_hook(f"tok-{root}", "yes")
        return (await engine.run(root)).status

    try:
        return asyncio.run(go())
    finally:
        world.close()


def _named(data: Path, root: str) -> list[str]:
    return (data / "runs" / root / RECORD).read_text().splitlines()


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every folder listed from now on (os.listdir and os.scandir)."""
    seen: list[str] = []
    real_listdir, real_scandir = os.listdir, os.scandir

    def listdir(path: Any = ".") -> list[str]:
        seen.append(os.fspath(path))
        return real_listdir(path)

    def scandir(path: Any = ".") -> Any:
        seen.append(os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)
    return seen


def test_a_familys_record_names_each_of_its_streams_as_it_makes_them(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _park(data, "a")
    _park(data, "b")
    assert _named(data, "a") == ["events.a", "history.a"]  # in the order they were made
    assert _wake(data, "a") == "completed"
    assert _named(data, "a") == ["events.a", "history.a", "tools.a.1"]
    assert _named(data, "b") == ["events.b", "history.b"]  # not a's, not `forks:b`


def test_waking_a_parked_family_lists_no_stream_folder(tmp_path: Path, listings: list[str]) -> None:
    data = tmp_path / "data"
    for root in ("a", "b", "c"):
        _park(data, root)
    listings.clear()
    assert _wake(data, "b") == "completed"
    streams = os.fspath(data / "streams")
    assert streams not in [os.path.normpath(p) for p in listings], listings
    # Without a record (a family an older eve made) its streams are listed, and the lease
    # holder writes a whole record, so the next process lists nothing again.
    (data / "runs" / "c" / RECORD).unlink()
    listings.clear()
    world = LocalWorld(data)
    world.acquire("c").release()
    world.close()
    assert streams in [os.path.normpath(p) for p in listings]
    assert _named(data, "c") == ["events.c", "history.c"]
    listings.clear()
    assert _wake(data, "c") == "completed"
    assert streams not in [os.path.normpath(p) for p in listings]


def test_damage_in_a_named_stream_stops_a_write_to_its_family(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _park(data, "a")
    stream = data / "streams" / "history.a.msgpack"
    raw = bytearray(stream.read_bytes())
    raw[-2] ^= 0xFF  # inside the last item's body: its crc fails
    stream.write_bytes(bytes(raw))
    world = LocalWorld(data)
    with pytest.raises(CorruptJournalError, match=r"history\.a\.msgpack"):
        world.deliver("a", "tok-a", "yes")
    world.close()


def test_a_fork_names_its_copied_streams_before_they_exist(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _park(data, "src")
    world = LocalWorld(data)
    engine = Engine(world, _flows(world))

    async def go() -> None:
        plan = await engine.fork("src", "dup", streams={"events.src": 1, "history.src": 1})
        assert plan.root == "dup"

    asyncio.run(go())
    world.close()
    assert _named(data, "dup") == ["events.dup", "history.dup"]
    assert (data / "streams" / "events.dup.msgpack").exists()


def test_verify_reports_a_stream_its_record_does_not_name_and_repair_names_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    _park(data, "a")
    found = {f.path: f for f in verify(data)}
    assert found[f"runs/a/{RECORD}"].state == "ok"
    (data / "runs" / "a" / RECORD).write_text("events.a\nhistory.a")  # a cut tore a line
    found = {f.path: f for f in verify(data)}
    record = found[f"runs/a/{RECORD}"]
    assert (record.kind, record.state, record.family) == ("record", "stale", "a")
    assert "history.a" in record.detail
    done = {f.path: f for f in repair(data)}
    assert done[f"runs/a/{RECORD}"].state == "repaired"
    assert _named(data, "a") == ["events.a", "history.a"]
    assert all(f.ok for f in verify(data))


def test_a_stream_whose_data_is_durable_is_named_durably_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At every sync, in what a power cut may keep: each of the family's stream files holding
    durable bytes is named by the durable content of the family's record (the record is
    fdatasync'd before any stream data is)."""
    base = tmp_path / "device"
    base.mkdir()
    disk = Disk(base)
    with monkeypatch.context() as patch:
        disk.install(patch)
        _park(base / "data", "a")
        assert _wake(base / "data", "a") == "completed"
        disk.mark("end")
    checked = 0
    for moment in disk.moments:
        record = moment.files.get(f"data/runs/a/{RECORD}")
        named = (moment.durable.get(record[0], b"") if record else b"").decode().split("\n")
        for path, (ino, _) in moment.files.items():
            stem = os.path.basename(path).removesuffix(".msgpack")
            if not path.startswith("data/streams/") or not path.endswith(".msgpack"):
                continue
            if stem.split(".")[1:2] != ["a"] or not moment.durable.get(ino):
                continue
            checked += 1
            assert stem in named[:-1], f"{stem} durable but not named at moment {moment.number}"
    assert checked >= 6, "no durable stream was seen"
