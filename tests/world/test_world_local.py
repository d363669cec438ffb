"""LocalWorld specifics: the on-disk layout, file counts, heads, torn tails, permissions."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from world import (
    CorruptJournalError,
    Engine,
    JournalRecord,
    LocalWorld,
    MigratingRecord,
    MigrationStep,
    OwnershipError,
    StorageError,
    StoreFormatError,
    WorkflowContext,
    World,
    WorldError,
    _journal,
    decode,
    default_data_dir,
    register_migration_step,
    verify,
)
from world import _migrations as _migrate
from world._family import Family, load_family
from world._records import StoredRecord
from world._store import RECORD, Order
from world._world import unpack_token
from world.stores.local.world import inbox_lock


async def steps(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.step(f"s{i}", lambda i=i: i)
    hook = ctx.create_hook(f"t-{ctx.run_id}")
    return int(await hook.receive())


def _files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def _run_steps(path: Path, n: int) -> tuple[Engine, str]:
    engine = Engine(LocalWorld(path), {"steps": steps})
    rid = asyncio.run(engine.start("steps", n, run_id="fixed"))
    asyncio.run(engine.run(rid))
    return engine, rid


def test_file_count_grows_with_runs_not_steps(tmp_path: Path) -> None:
    _run_steps(tmp_path / "ten", 10)
    _run_steps(tmp_path / "thousand", 1000)
    assert _files(tmp_path / "ten") == _files(tmp_path / "thousand")
    assert _files(tmp_path / "ten") == [
        "FORMAT", "hooks/t-fixed", "runs/fixed/head.msgpack", "runs/fixed/journal.msgpack",
        "runs/fixed/owner.lock", "runs/fixed/streams.list", "runs/fixed/wal.msgpack",
    ]  # fmt: skip
    found = json.loads((tmp_path / "ten" / "FORMAT").read_text())
    assert found == {"format": "eve-world", "version": 3, "id": found["id"]}
    assert str(uuid.UUID(found["id"])) == found["id"]


def test_journal_is_plain_msgpack_with_checksummed_records(tmp_path: Path) -> None:
    engine, rid = _run_steps(tmp_path, 3)
    with open(tmp_path / "runs" / "fixed" / "journal.msgpack", "rb") as f:
        records = [decode(body) for _, _, body in msgpack.Unpacker(f, raw=False)]
    assert [r["t"] for r in records] == ["header", "start", "step", "step", "step", "hook", "park"]
    assert records[0]["version"] == _journal.JOURNAL_VERSION == 5
    # Since version 2: the root run's records name no run; only `start` has the absolute time,
    # the others whole milliseconds since it; a step that succeeded at once leaves out `n`.
    assert not any("run" in r or "seq" in r for r in records[1:])
    assert isinstance(records[1]["at"], float) and "d" not in records[1]
    assert all(isinstance(r["d"], int) and "at" not in r for r in records[2:])
    assert [r.get("ok") for r in records[2:5]] == [0, 1, 2] and "n" not in records[2]
    history = engine.history(rid)
    assert [r["t"] for r in history] == [r["t"] for r in records[1:]]
    assert all({"run", "g", "t", "at"} <= set(r) and r["run"] == rid for r in history)
    assert [r["n"] for r in history if r["t"] == "step"] == [1, 1, 1]
    assert [r["at"] for r in history] == sorted(r["at"] for r in history)
    assert history[2]["at"] == history[0]["at"] + records[3]["d"] / 1000


def test_lost_head_is_rebuilt_from_the_journal(tmp_path: Path) -> None:
    engine, rid = _run_steps(tmp_path, 2)
    (tmp_path / "runs" / rid / "head.msgpack").write_bytes(b"\x00garbage")
    assert engine.info(rid).status == "parked"
    asyncio.run(engine.resume_hook(f"t-{rid}", 7))
    assert asyncio.run(engine.run(rid)).result == 7


def test_a_head_is_rewritten_in_place_and_read_whole_or_not_at_all(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    world.create_family("h", [_codec_body({"t": "start"})])
    path = tmp_path / "runs" / "h" / "head.msgpack"
    inode = None
    for n in (40, 3, 0):  # a shorter head after a longer one leaves nothing of it behind
        head = {"v": 1, "runs": {f"r{i}": {"status": "parked"} for i in range(n)}}
        world.write_head("h", head)
        assert world.read_head("h") == head
        assert path.stat().st_size == len(_journal.frame(head))
        inode = inode or path.stat().st_ino
        assert path.stat().st_ino == inode  # in place, no rename
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # damaged: no head (rebuilt)
    assert world.read_head("h") is None
    older = {"v": 1, "runs": {"r": {"status": "parked"}}}
    path.write_bytes(_codec_body(older))  # a head as earlier versions wrote it: no checksum,
    assert world.read_head("h") is None  # so not believed (rebuilt from the journal)
    assert _journal.is_plain_head(path.read_bytes())  # what `eve doctor` tells apart
    heads = [{"v": 1, "runs": {f"r{i}": {"n": i}}, "pad": "x" * (i * 37 % 500)} for i in range(50)]
    stop, seen = threading.Event(), list[dict[str, Any]]()
    world.write_head("h", heads[0])

    def write() -> None:
        while not stop.is_set():
            for head in heads:
                world.write_head("h", head)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(2000):  # a reader racing the writer sees whole heads only
            read = world.read_head("h")
            if read is not None:
                seen.append(read)
    finally:
        stop.set()
        writer.join()
    assert len(seen) > 1900 and all(head in heads for head in seen)  # rarely none at all
    world.close()


def _codec_body(record: dict[str, Any]) -> bytes:
    from world import encode

    return encode(record)


def test_torn_journal_tail_is_dropped_and_the_run_resumes(tmp_path: Path) -> None:
    engine, rid = _run_steps(tmp_path, 2)
    journal = tmp_path / "runs" / rid / "journal.msgpack"
    size = journal.stat().st_size
    with open(journal, "ab") as f:
        f.write(b"\x93\x01\xce\x00")  # a record cut short by a crash
    asyncio.run(engine.resume_hook(f"t-{rid}", 5))
    assert asyncio.run(engine.run(rid)).result == 5
    with open(journal, "rb") as f:
        assert all(frame[0] == 1 for frame in msgpack.Unpacker(f, raw=False))
    assert journal.stat().st_size > size


def test_corrupt_record_stops_the_run_with_file_and_offset(tmp_path: Path) -> None:
    engine, rid = _run_steps(tmp_path, 3)
    journal = tmp_path / "runs" / rid / "journal.msgpack"
    (tmp_path / "runs" / rid / "head.msgpack").unlink()
    data = bytearray(journal.read_bytes())
    data[60] ^= 0x55
    journal.write_bytes(bytes(data))
    asyncio.run(engine.resume_hook(f"t-{rid}", 5))
    with pytest.raises(CorruptJournalError) as err:
        asyncio.run(engine.run(rid))
    assert err.value.file == str(journal)
    assert journal.read_bytes() == bytes(data)  # nothing was rewritten or lost


async def looping(ctx: WorkflowContext, n: int) -> Any:
    hook = ctx.create_hook("t-loop") if n == 0 else ctx.hook("t-loop")
    for i in range(5):
        await ctx.step(f"work{i}", lambda: n)
    message = await hook.receive()
    if message == "stop":
        return n
    ctx.continue_as_new(n + 1)


def test_resume_reads_only_the_current_generation(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    engine = Engine(world, {"loop": looping})
    rid = asyncio.run(engine.start("loop", 0))
    for _ in range(20):
        asyncio.run(engine.run(rid))
        asyncio.run(engine.resume_hook("t-loop", "more"))
    family = load_family(world, rid)
    assert len(family.runs[rid].records) <= 6
    assert family.runs[rid].g == 19  # the 20th delivery waits, not yet consumed
    asyncio.run(engine.resume_hook("t-loop", "stop"))
    info = asyncio.run(engine.run(rid))
    assert (info.result, info.generation) == (20, 20)


def test_newer_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / "FORMAT").write_text('{"format": "eve-world", "version": 9}')
    with pytest.raises(WorldError, match="newer"):
        LocalWorld(tmp_path)


def test_default_data_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVE_DATA_DIR", "/somewhere/else")
    assert default_data_dir() == Path("/somewhere/else")
    monkeypatch.delenv("EVE_DATA_DIR")
    assert default_data_dir() == Path(".workflow-data")


def test_permission_problem_is_one_clear_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        target = Path("/sys/eve-world-test")  # refused even to root
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = locked / "data"
    with pytest.raises(StorageError, match="permission denied") as err:
        LocalWorld(target)
    assert str(target) in str(err.value)


async def parent_of_one(ctx: WorkflowContext, _: Any) -> Any:
    await ctx.step("before", lambda: None)
    return await ctx.run_child("child_of_one", 5)


async def child_of_one(ctx: WorkflowContext, n: int) -> int:
    return int(await ctx.step("work", lambda: n * 2))


def test_child_start_cut_by_a_crash_is_adopted_not_started_twice(tmp_path: Path) -> None:
    workflows = {"parent": parent_of_one, "child_of_one": child_of_one}
    engine = Engine(LocalWorld(tmp_path), workflows)
    rid = asyncio.run(engine.start("parent", run_id="p"))
    assert asyncio.run(engine.run(rid)).result == 10
    journal = tmp_path / "runs" / "p" / "journal.msgpack"
    offsets = [pos for pos, _ in _journal.read_file(str(journal)).records]
    kinds = [rec["t"] for _, rec in _journal.read_file(str(journal)).records]
    link = kinds.index("child")
    assert kinds[link - 1] == "start"  # the child's start is written before the parent's link
    # As if killed in the middle of that two-record write: the start survived, the link not.
    with open(journal, "r+b") as f:
        f.truncate(offsets[link] + 3)
    (tmp_path / "runs" / "p" / "head.msgpack").unlink()
    assert asyncio.run(Engine(LocalWorld(tmp_path), workflows).run(rid)).result == 10
    after = Engine(LocalWorld(tmp_path), workflows)
    assert [r["t"] for r in after.history("p.0")].count("start") == 1
    assert [r["t"] for r in after.history("p")].count("child") == 1


def test_reading_writes_nothing(tmp_path: Path) -> None:
    engine, rid = _run_steps(tmp_path / "data", 2)
    engine.world.stream_append("events.x", 1)
    engine.world.close()
    (tmp_path / "data" / "runs" / rid / "head.msgpack").unlink()  # info must rebuild in memory

    def snapshot() -> dict[str, tuple[int, int]]:
        return {
            str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in (tmp_path / "data").rglob("*")
        }

    before = snapshot()
    reader = Engine(LocalWorld(tmp_path / "data", create=False), {})
    assert reader.info(rid).status == "parked"
    assert [r["t"] for r in reader.history(rid)][:2] == ["start", "step"]
    assert reader.world.stream_read("events.x") == [1]
    assert [i.run_id for i in reader.runs()] == [rid]
    assert snapshot() == before
    missing = LocalWorld(tmp_path / "nowhere", create=False)
    assert missing.families() == [] and missing.stream_read("events.x") == []
    assert not (tmp_path / "nowhere").exists()


def _as_format_1(data: Path) -> Path:
    """The store at ``data`` as the last pre-release code left it: the current forms under
    FORMAT 1, without the record of each family's streams (format 2 added it). Its FORMAT."""
    fmt = data / "FORMAT"
    fmt.write_text('{"format": "eve-world", "version": 1}\n')
    for record in data.glob("runs/*/streams.list"):
        record.unlink()
    return fmt


def test_a_store_of_format_1_is_migrated_once_at_open(tmp_path: Path) -> None:
    """A store of the last pre-release code held the current forms under FORMAT 1: opening
    it rewrites FORMAT alone (its journal is stored again byte for byte), once."""
    engine, rid = _run_steps(tmp_path / "data", 2)
    engine.world.close()
    fmt = _as_format_1(tmp_path / "data")
    journal = tmp_path / "data" / "runs" / rid / "journal.msgpack"
    kept = journal.read_bytes()
    world = LocalWorld(tmp_path / "data", create=False)
    assert world.migration is not None and "\n" not in str(world.migration)
    assert str(world.migration).startswith(f"{tmp_path / 'data'}: migrated store format 1 -> 3")
    assert json.loads(fmt.read_text())["version"] == 3 and journal.read_bytes() == kept
    assert LocalWorld(tmp_path / "data").migration is None  # once
    assert verify(tmp_path / "data") and not any(f.error for f in verify(tmp_path / "data"))


def test_verify_and_repair_do_not_check_a_store_of_format_1(tmp_path: Path) -> None:
    from world import repair

    engine, _ = _run_steps(tmp_path / "data", 2)
    engine.world.close()
    fmt = _as_format_1(tmp_path / "data")
    before = {str(p): p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file()}
    attempts: list[Callable[[], object]] = [
        lambda: verify(tmp_path / "data"),
        lambda: repair(tmp_path / "data"),
    ]
    for attempt in attempts:
        with pytest.raises(StoreFormatError) as err:
            attempt()  # a repair would take the older forms for damage
        message = str(err.value)
        assert "\n" not in message and str(fmt) in message, message
        assert "store format 1" in message and "opening the store migrates it" in message
        assert "eve " not in message  # world names no command
    after = {str(p): p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file()}
    assert after == before


async def _parent(ctx: WorkflowContext, n: int) -> Any:
    got = await ctx.run_child("child", n)
    return [got, await ctx.create_hook("t-old").receive()]


async def _child(ctx: WorkflowContext, n: int) -> Any:
    return await ctx.step("double", lambda: n * 2)


def _whole(world: World, root: str) -> list[JournalRecord]:
    """Every record of the family, whole, in journal order."""
    return load_family(world, root, full=True, log=True).log or []


def _but_at(rec: dict[str, Any]) -> dict[str, Any]:
    """A whole record without its time (stored to the millisecond after the generation's)."""
    return {k: v for k, v in rec.items() if k != "at"}


def _pre_release(data: Path, root: str) -> None:
    """Rewrite family `root` in the first pre-release forms: journal version 1 (whole records,
    a `child_done` after a child's end) and inbox version 1 (`{t: item, ...}` deliveries)."""
    folder = data / "runs" / root
    records = _whole(LocalWorld(data), root)
    inbox = _journal.read_inbox_file(str(folder / "inbox.msgpack")).records[1:]
    old_ids, out = (
        {},
        bytearray(_journal.frame({**_journal.header("eve-world-inbox"), "version": 1})),
    )
    for pos, rec in inbox:
        old_ids[pos] = len(out)
        item = {"t": "item", "token": unpack_token(rec["k"]), "payload": rec["p"], "at": rec["a"]}
        out += _journal.frame(item)
    (folder / "inbox.msgpack").write_bytes(bytes(out))
    journal = bytearray(_journal.frame({**_journal.header(), "version": 1}))
    for whole in records:
        one: dict[str, Any] = dict(whole)
        if one["t"] == "recv":
            one["ids"] = [old_ids[i] for i in one["ids"]]
        one.pop("inbox", None)
        journal += _journal.frame(one)
        if one["t"] == "done" and one["run"] != root:
            done = {"run": root, "g": 0, "at": one["at"], "t": "child_done",
                    "child": one["run"], "result": one["result"]}  # fmt: skip
            journal += _journal.frame(done)
    (folder / "journal.msgpack").write_bytes(bytes(journal))
    (folder / "head.msgpack").unlink()
    _as_format_1(data)


def test_the_first_pre_release_forms_are_migrated_and_the_run_goes_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    flows = {"parent": _parent, "child": _child}
    engine = Engine(LocalWorld(data), flows)
    rid = asyncio.run(engine.start("parent", 21, run_id="old"))
    asyncio.run(engine.run(rid))
    asyncio.run(engine.deliver("t-old", "first"))  # received by a later open, after migrating
    history: list[dict[str, Any]] = [
        {k: v for k, v in r.items() if k != "inbox"} for r in _whole(engine.world, rid)
    ]
    engine.world.close()
    _pre_release(data, rid)
    seen: list[tuple[str, str]] = []

    def step(rec: MigratingRecord) -> None:
        seen.append((rec.workflow, rec.record["t"]))

    register_migration_step(MigrationStep(2, "test.seen", step))
    try:
        world = LocalWorld(data)
    finally:
        _migrate._STEPS.pop("test.seen")
    assert world.migration is not None and world.migration.dropped == 1  # the child_done
    assert world.migration.deliveries == 1 and ("child", "step") in seen
    migrated = Engine(world, flows)
    now: list[dict[str, Any]] = [
        {k: v for k, v in r.items() if k != "inbox"} for r in _whole(world, rid)
    ]
    assert [_but_at(r) for r in now] == [_but_at(r) for r in history]  # the same records
    assert all(abs(a["at"] - b["at"]) < 1e-3 for a, b in zip(now, history, strict=True))
    info = asyncio.run(migrated.run(rid))
    assert info.status == "completed" and info.result == [42, "first"]


def test_a_journal_header_of_another_version_is_refused(tmp_path: Path) -> None:
    engine, rid = _run_steps(tmp_path / "data", 1)
    engine.world.close()
    journal = tmp_path / "data" / "runs" / rid / "journal.msgpack"
    records = _journal.read_file(str(journal)).records
    data = journal.read_bytes()
    for version in (_journal.JOURNAL_VERSION - 1, _journal.JOURNAL_VERSION + 1):
        header = _journal.frame({**records[0][1], "version": version})
        journal.write_bytes(header + data[records[1][0] :])
        with pytest.raises(StoreFormatError, match=f"journal version {version} is"):
            _journal.read_file(str(journal))


async def _carries_hook(ctx: WorkflowContext, g: int) -> Any:
    if g == 0:
        ctx.create_hook("t-carried")
        ctx.continue_as_new(1)
    return await ctx.hook("t-carried").receive()


def test_a_park_names_a_hook_of_its_generation_by_index(tmp_path: Path) -> None:
    engine = Engine(LocalWorld(tmp_path), {"carry": _carries_hook})
    rid = asyncio.run(engine.start("carry", 0, run_id="c"))
    assert asyncio.run(engine.run(rid)).waiting == {"hook": "t-carried"}
    journal = tmp_path / "runs" / "c" / "journal.msgpack"
    stored = [rec for _, rec in _journal.read_file(str(journal)).records]
    assert [r["t"] for r in stored[-2:]] == ["gen", "park"] and stored[-2]["hooks"] == ["t-carried"]
    assert stored[-1]["waiting"] == {"hook": 0}
    assert engine.history(rid)[-1]["waiting"] == {"hook": "t-carried"}
    (tmp_path / "runs" / "c" / "head.msgpack").unlink()  # the status comes from the journal
    engine = Engine(LocalWorld(tmp_path), {"carry": _carries_hook})
    info = engine.info(rid)
    assert (info.status, info.waiting) == ("parked", {"hook": "t-carried"})
    asyncio.run(engine.resume_hook("t-carried", "x"))
    assert asyncio.run(engine.run(rid)).result == "x"


class _HeldWorld(LocalWorld):
    """Holds the durable journal appends of one family until `gate` is set (a slow disk)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.held = ""
        self.gate = threading.Event()
        self.entered = threading.Event()  # a held append has begun

    def append(self, root: str, bodies: list[bytes], order: Order = RECORD) -> list[int]:
        if root == self.held and not order.lazy:
            self.entered.set()
            # Bounded: on the loop's thread this blocks every family until it gives up.
            assert self.gate.wait(3), "held append released by nobody"
        return super().append(root, bodies, order)


async def _value(i: int) -> int:
    await asyncio.sleep(0)  # lets the other family's drive run: both are being driven
    return i


async def total(ctx: WorkflowContext, n: int) -> int:
    return sum([await ctx.step(f"s{i}", _value, i) for i in range(n)])


def test_a_family_waiting_for_its_fsync_does_not_hold_up_the_others(tmp_path: Path) -> None:
    # Durable appends run off the event loop: while one family's write waits for the disk,
    # other families progress, and the waiting one proceeds only once its write returned.
    world = _HeldWorld(tmp_path / "data")
    engine = Engine(world, {"total": total})

    async def main() -> None:
        slow = await engine.start("total", 2, run_id="slow")
        fast = await engine.start("total", 3, run_id="fast")
        world.held = slow
        held = asyncio.create_task(engine.run(slow))
        assert (await asyncio.wait_for(engine.run(fast), 10)).result == 3
        assert not held.done()  # still waiting for its first step's record
        assert [r["t"] for r in engine.history(slow)] == ["start"]
        world.gate.set()
        assert (await asyncio.wait_for(held, 10)).result == 1

    asyncio.run(main())


def test_a_drive_cancelled_during_its_write_keeps_the_lease_until_the_write_ends(
    tmp_path: Path,
) -> None:
    world = _HeldWorld(tmp_path / "data")
    busy_done = asyncio.Event()

    async def busy(ctx: WorkflowContext, _: None) -> None:
        await ctx.step("busy", busy_done.wait)  # another family being driven meanwhile

    engine = Engine(world, {"total": total, "busy": busy})

    async def main() -> None:
        other = asyncio.create_task(engine.run(await engine.start("busy", run_id="other")))
        slow = await engine.start("total", 2, run_id="slow")
        world.held = slow
        held = asyncio.create_task(engine.run(slow))
        while not world.entered.is_set():
            await asyncio.sleep(0.01)  # until the first step's record is being written
        held.cancel()
        await asyncio.sleep(0.05)
        assert not held.done()  # waits for its write before letting the cancellation through
        with pytest.raises(OwnershipError):
            await engine.run(slow)  # the lease is still held
        world.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(held, 10)
        world.held = ""
        assert (await asyncio.wait_for(engine.run(slow), 10)).result == 1
        assert [r.get("name") for r in engine.history(slow) if r["t"] == "step"] == ["s0", "s1"]
        busy_done.set()
        await asyncio.wait_for(other, 10)

    asyncio.run(main())


async def _hex_loop(ctx: WorkflowContext, n: int) -> int:
    hook = ctx.create_hook("0a1b2c3d") if n == 0 else ctx.hook("0a1b2c3d")
    if await hook.receive() == "stop":
        return n
    ctx.continue_as_new(n + 1)
    return -1


def _three_generations(tmp_path: Path, rid: str) -> tuple[LocalWorld, str, list[Any]]:
    """A `_hex_loop` run through three deliveries (the last not yet read), its stored records."""
    world = LocalWorld(tmp_path)
    engine = Engine(world, {"loop": _hex_loop})
    rid = asyncio.run(engine.start("loop", 0, run_id=rid))
    for _ in range(3):
        asyncio.run(engine.run(rid))
        asyncio.run(engine.resume_hook("0a1b2c3d", "more"))
    with open(tmp_path / "runs" / rid / "journal.msgpack", "rb") as f:
        stored = [decode(body) for _, _, body in msgpack.Unpacker(f, raw=False)]
    return world, rid, stored


def test_a_version_4_gen_leaves_its_workflow_to_the_start_and_stores_hex_hooks_as_bytes(
    tmp_path: Path,
) -> None:
    world, rid, stored = _three_generations(tmp_path, "hexloop")
    gens = [r for r in stored if r["t"] == "gen"]
    assert gens and all("workflow" not in r for r in gens)
    assert all(r["hooks"] == [bytes.fromhex("0a1b2c3d")] for r in gens)
    # A load beginning at the current `gen` (the head's scan) has the workflow from the head.
    family = load_family(world, rid)
    assert family.runs[rid].workflow == "loop" and family.runs[rid].gen_hooks == ["0a1b2c3d"]
    fresh = Engine(LocalWorld(tmp_path), {"loop": _hex_loop})
    asyncio.run(fresh.resume_hook("0a1b2c3d", "stop"))
    assert asyncio.run(fresh.run(rid)).result == 3
    whole = [r for r in fresh.history(rid) if r["t"] == "gen"]
    assert {r["workflow"] for r in whole} == {"loop"}
    assert all(r["hooks"] == ["0a1b2c3d"] for r in whole)
    # A version-3 `gen` (workflow and hooks as written) reads as it always did.
    v3: StoredRecord = {
        "t": "gen",
        "at": 1.0,
        "g": 1,
        "input": 0,
        "hooks": ["t-x"],
        "workflow": "w",
    }
    whole_v3 = {**v3, "run": "other", "parent": None, "nc": 0}
    assert Family("other").expand(v3) == whole_v3


def test_a_version_5_start_or_gen_stores_an_inbox_state_with_nothing_extra_as_its_watermark(
    tmp_path: Path,
) -> None:
    world, rid, stored = _three_generations(tmp_path, "marks")
    marks = [r["inbox"] for r in stored if r["t"] in ("start", "gen")]
    assert len(marks) == 3 and all(isinstance(w, int) for w in marks) and marks[-1] > 0
    # A load beginning at the last `gen` (the head's scan) starts from its watermark.
    family = load_family(world, rid)
    assert family.watermark == marks[-1] and family.runs[rid].gen_w == marks[-1]
    fresh = Engine(LocalWorld(tmp_path), {"loop": _hex_loop})
    asyncio.run(fresh.resume_hook("0a1b2c3d", "stop"))
    assert asyncio.run(fresh.run(rid)).result == 3
    whole = [r["inbox"] for r in fresh.history(rid) if r["t"] in ("start", "gen")]
    assert whole[:3] == [{"w": w, "x": []} for w in marks] and len(whole) == 4
    # Version 4 (the state as a map, extra consumed ids or not) reads as it always did.
    v4: StoredRecord = {"t": "gen", "at": 1.0, "g": 1, "input": 0, "inbox": {"w": 7, "x": [9]}}
    assert Family("other").expand(v4)["inbox"] == {"w": 7, "x": [9]}
    assert Family("other").pack({**Family("other").expand(v4), "at": 1.0}, 1.0)["inbox"] == {
        "w": 7,
        "x": [9],
    }


def test_the_inbox_lock_excludes_a_filelock_on_it_and_the_other_way(tmp_path: Path) -> None:
    import filelock

    world = LocalWorld(tmp_path)
    world.create_family("f", [_codec_body({"t": "start"})])
    path = tmp_path / "runs" / "f" / "inbox.lock"
    other = filelock.FileLock(str(path), timeout=0, preserve_lock_file=True)  # as eve doctor
    busy = pytest.raises(OwnershipError, match=r"inbox\.lock")
    with other, busy, inbox_lock(path, 0.05, "f", world.path):
        pass
    with inbox_lock(path, 0.05, "f", world.path):
        with pytest.raises(filelock.Timeout):
            other.acquire()
        held = threading.Thread(target=lambda: world.deliver("f", "tok", 1))
        held.start()  # a delivery waits for the lock ...
        held.join(0.2)
        assert held.is_alive()
    held.join(5)  # ... and goes in once it is free
    assert not held.is_alive() and [i.payload for i in world.read_inbox("f")[0]] == [1]
    world.close()


def test_the_lease_excludes_a_filelock_on_owner_lock_and_the_other_way(tmp_path: Path) -> None:
    import filelock

    world = LocalWorld(tmp_path)
    world.create_family("f", [_codec_body({"t": "start"})])
    other = filelock.FileLock(
        str(tmp_path / "runs" / "f" / "owner.lock"), timeout=0, preserve_lock_file=True
    )  # as eve doctor and a migration take it
    with other, pytest.raises(OwnershipError, match="owned by another process"):
        world.acquire("f", 0.05)
    lease = world.acquire("f")
    with pytest.raises(filelock.Timeout):
        other.acquire()
    lease.release()
    with other:  # free once released
        pass
    world.close()


def test_check_intact_reads_back_only_what_another_process_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a family's next acquire, this process does not parse again the journal records and
    stream items it framed itself (it knows their crc); a new process believes its head's
    note of them only where the bytes on disk still match, so damage is still found."""
    world = LocalWorld(tmp_path)

    async def turns(ctx: WorkflowContext, _: Any) -> None:
        hook = await ctx.create_hook("t-turns")
        n = 0
        while True:
            await hook.receive()
            n += 1
            await ctx.step(f"s{n}", lambda n=n: world.stream_append(f"events.{ctx.run_id}", n))

    parsed: list[tuple[str, int]] = []
    real_parse = _journal.parse

    def parse(data: bytes, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("decode") is False:  # check_intact's walk over frames
            parsed.append((Path(args[1]).name, len(data)))
        return real_parse(data, *args, **kwargs)

    monkeypatch.setattr(_journal, "parse", parse)

    def turn(engine: Engine) -> None:
        async def go() -> None:
            await engine.resume_hook("t-turns", "go")
            await engine.run("talk")

        asyncio.run(go())

    def read_back() -> set[str]:
        return {name for name, size in parsed if size and not name.startswith("inbox")}

    engine = Engine(world, {"turns": turns})
    asyncio.run(engine.start("turns", run_id="talk"))
    asyncio.run(engine.run("talk"))
    turn(engine)  # the stream is made: read whole once at the next acquire
    turn(engine)
    parsed.clear()
    turn(engine)  # acquired again: the records and items of the turn before are its own
    assert read_back() == set()
    assert world.stream_read("events.talk") == [1, 2, 3]

    parsed.clear()
    fresh = Engine(LocalWorld(tmp_path), {"turns": turns})
    turn(fresh)  # a new process: the head's note holds (its crc matches the bytes on disk)
    assert read_back() == set()

    journal = tmp_path / "runs" / "talk" / "journal.msgpack"
    data = bytearray(journal.read_bytes())
    data[len(data) // 2] ^= 0xFF  # damage inside what the note covers
    journal.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError, match="takes no writes"):
        LocalWorld(tmp_path).acquire("talk")


def test_the_timers_notes_start_afresh_past_their_size_and_readers_then_read_every_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world.stores.local import timers

    world = LocalWorld(tmp_path / "data")
    monkeypatch.setattr(timers, "TIMERS_ROTATE", 64)
    version = world.timers_version()
    for i in range(5):
        world._timers.note(f"r{i}-" + "x" * 20)
    # Past 64 bytes a writer began a new file: what was noted before is gone, a reader told so.
    assert world.timers_since(version)[1] is None
    now = world.timers_version()
    world._timers.note("r9")
    assert world.timers_since(now) == (world.timers_version(), ["r9"])
    assert sorted(os.listdir(tmp_path / "data")).count("timers") == 1


def test_heads_are_those_of_the_folders_with_a_journal_in_root_order(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    for root in ("b", "a", "c"):
        world.create_family(root, [])
        world.write_head(root, {"runs": {root: {"status": "parked"}}})
    (tmp_path / "data" / "runs" / "remnant").mkdir()  # a folder without a journal: no family
    (tmp_path / "data" / "runs" / "remnant" / "head.msgpack").write_bytes(b"")
    heads = world.heads()
    assert [h.root for h in heads] == ["a", "b", "c"] == world.families()
    assert [h.head for h in heads] == [world.read_head(r) for r in ("a", "b", "c")]
    assert [h.inbox_end for h in heads] == [world.inbox_end(r) for r in ("a", "b", "c")]
    assert [h.inbox_end for h in world.heads(inbox=False)] == [-1, -1, -1]


def test_a_head_longer_than_one_read_is_read_whole(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    world.create_family("big", [])
    runs = {f"big.{i}": {"status": "completed", "result": "x" * 100} for i in range(1000)}
    world.write_head("big", {"runs": runs})
    assert (tmp_path / "data" / "runs" / "big" / "head.msgpack").stat().st_size > 1 << 16
    head = world.read_head("big")
    assert head is not None and head["runs"] == runs
    assert [h.head for h in world.heads()] == [head]


def test_verify_on_a_read_only_file_system_tests_locks_without_writing(tmp_path: Path) -> None:
    """A disk that failed into read-only (ext4 after an I/O error): `verify` still reads the
    store, and a lock it cannot open for writing is tested read-only, not reported damaged."""
    import subprocess

    mount = tmp_path / "ro"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8M", "tmpfs", str(mount)],
                          capture_output=True)  # fmt: skip
    if made.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs in CI: {made.stderr.decode().strip()}")
        pytest.skip("mounting a tmpfs needs root (CI runs it)")
    try:
        engine, _ = _run_steps(mount / "data", 2)
        engine.world.close()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        found = verify(mount / "data")
        locks = [f for f in found if f.kind == "lock"]
        assert locks and all(f.state == "ok" for f in locks), locks
        assert not [f for f in found if f.error], found
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_removing_a_held_family_writes_none_of_its_open_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Items appended on the loop wait in an open batch for the family's next commit; a
    # removal under the lease drops them unwritten (their files go next), not writes them.
    world = LocalWorld(tmp_path / "data")

    async def parks(ctx: WorkflowContext, token: str) -> Any:
        return await ctx.create_hook(token).receive()

    asyncio.run(Engine(world, {"parks": parks}).start("parks", "tok", run_id="a"))
    lease = world.acquire("a")
    writes: list[int] = []
    real = os.pwrite

    def pwrite(fd: int, data: bytes, at: int) -> int:
        writes.append(len(data))
        return real(fd, data, at)

    async def append_then_remove() -> None:
        world.stream_append("events.a", {"x": 1})
        monkeypatch.setattr(os, "pwrite", pwrite)
        assert world.remove_family("a")

    asyncio.run(append_then_remove())
    lease.release()
    assert writes == [] and world.stream_names() == []
    world.close()
