"""Journal files: plain msgpack, checksummed, torn tails discarded, corruption reported."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from tests.world.io_spy import io_log, synced
from world import (
    CorruptJournalError,
    Engine,
    LocalWorld,
    StorageError,
    WorkflowContext,
    _faults,
    _journal,
)
from world.stores.local.world import EFFECT_WAIT


def _write(path: Path, records: list[dict[str, object]]) -> list[int]:
    writer = _journal.Writer(str(path), 0)
    offsets = [writer.append(_journal.frame(rec)) for rec in [_journal.header(), *records]]
    writer.close()
    return offsets


@pytest.fixture
def journal(tmp_path: Path) -> tuple[Path, list[int]]:
    path = tmp_path / "journal.msgpack"
    return path, _write(path, [{"t": "step", "n": i, "future_field": [i]} for i in range(5)])


def test_plain_unpacker_reads_every_record(journal: tuple[Path, list[int]]) -> None:
    path, _ = journal
    with open(path, "rb") as f:
        frames = list(msgpack.Unpacker(f, raw=False))
    assert len(frames) == 6 and all(f[0] == 1 and isinstance(f[2], bytes) for f in frames)


def test_unknown_fields_are_kept(journal: tuple[Path, list[int]]) -> None:
    path, _ = journal
    records = [rec for _, rec in _journal.read_file(str(path)).records]
    assert records[1] == {"t": "step", "n": 0, "future_field": [0]}


def test_every_torn_tail_is_discarded(journal: tuple[Path, list[int]]) -> None:
    path, offsets = journal
    data = path.read_bytes()
    for cut in range(offsets[-1] + 1, len(data)):
        path.write_bytes(data[:cut])
        result = _journal.read_file(str(path))
        assert len(result.records) == 5 and result.end == offsets[-1] and result.torn


def test_a_torn_tail_read_alone_from_where_a_check_ended_is_torn() -> None:
    """What `check_intact` reads after the bytes it knows may be only a frame's first byte or
    two: still a write cut short, whatever the size of what is read."""
    frame = _journal.frame({"v": "x" * 300}, "item")
    for cut in range(1, len(frame)):
        result = _journal.parse(frame[:cut], 781, "f", decode=False)
        assert result.torn and result.end == 781 and not result.records, cut


def test_flipped_byte_in_the_whole_last_record_is_damage_not_a_torn_tail(
    journal: tuple[Path, list[int]],
) -> None:
    # A record of full length whose checksum fails was written whole and damaged later (it
    # may have been durable and shown): cutting it as a torn write would lose it silently.
    path, offsets = journal
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError) as err:
        _journal.read_file(str(path))
    assert (err.value.file, err.value.offset) == (str(path), offsets[-1])
    assert "not a write cut short" in str(err.value)


@pytest.mark.parametrize("version", [b"\xc3", b"\xc2", b"\x02"])  # true, false, 2
def test_a_frame_version_byte_turned_into_another_value_is_damage(
    journal: tuple[Path, list[int]], version: bytes
) -> None:
    # msgpack's true decodes to True, and True == 1: it once passed for the frame version.
    path, offsets = journal
    data = bytearray(path.read_bytes())
    assert data[offsets[2] + 1] == 0x01  # fixarray(3), then the version
    data[offsets[2] + 1 : offsets[2] + 2] = version
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError) as err:
        _journal.read_file(str(path))
    assert err.value.offset == offsets[2]


def test_a_write_cut_short_is_a_torn_tail_also_inside_reserved_space(
    journal: tuple[Path, list[int]],
) -> None:
    path, offsets = journal
    data = path.read_bytes()
    last = data[offsets[-1] :]
    for cut in (1, 2, len(last) // 2, len(last) - 1):
        path.write_bytes(data[: offsets[-1] + cut])  # the file ends inside the record
        short = _journal.read_file(str(path))
        assert short.torn and short.end == offsets[-1] and len(short.records) == 5
        # A writer reserving space: what it never wrote reads as zeros, the frame "whole".
        path.write_bytes(data[: offsets[-1] + cut] + bytes(len(last) - cut + 4096))
        reserved = _journal.read_file(str(path))
        assert reserved.torn and reserved.end == offsets[-1] and len(reserved.records) == 5


def test_bad_record_before_valid_ones_names_file_and_offset(
    journal: tuple[Path, list[int]],
) -> None:
    path, offsets = journal
    data = bytearray(path.read_bytes())
    data[offsets[2] + 8] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError) as err:
        _journal.read_file(str(path))
    assert (err.value.file, err.value.offset) == (str(path), offsets[2])
    assert str(path) in str(err.value) and str(offsets[2]) in str(err.value)


def test_newer_journal_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.msgpack"
    writer = _journal.Writer(str(path), 0)
    writer.append(_journal.frame({"t": "header", "format": "eve-world-journal", "version": 99}))
    writer.close()
    with pytest.raises(Exception, match="newer"):
        _journal.read_file(str(path))


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    table: dict[str, int] = {}
    monkeypatch.setattr(_faults, "FAULTS", table)
    monkeypatch.setattr(_faults, "ACTIVE", True)
    monkeypatch.setitem(_faults._counts, "write", 0)
    monkeypatch.setitem(_faults._counts, "read", 0)
    yield table


@pytest.mark.parametrize("fault", ["enospc", "eio_write"])
def test_failed_write_rolls_back_and_the_journal_stays_valid(
    tmp_path: Path, faults: dict[str, int], fault: str
) -> None:
    path = tmp_path / "j.msgpack"
    writer = _journal.Writer(str(path), 0)
    writer.append(_journal.frame(_journal.header()))
    writer.append(_journal.frame({"t": "a"}))
    faults[fault] = 3
    size = path.stat().st_size
    with pytest.raises(StorageError, match="rolled back"):
        writer.append(_journal.frame({"t": "b", "pad": "x" * 100}))
    assert path.stat().st_size == size
    writer.append(_journal.frame({"t": "c"}))
    writer.close()
    assert [r["t"] for _, r in _journal.read_file(str(path)).records] == ["header", "a", "c"]


def test_read_error_is_reported(tmp_path: Path, faults: dict[str, int]) -> None:
    path = tmp_path / "j.msgpack"
    _write(path, [])
    faults["eio_read"] = 1
    with pytest.raises(StorageError, match=str(path)):
        _journal.read_file(str(path))


def test_fault_spec_parsing() -> None:
    assert _faults.parse("crash_mid_write@3, eio_read") == {"crash_mid_write": 3, "eio_read": 1}
    with pytest.raises(ValueError, match="unknown fault"):
        _faults.parse("explode@1")
    assert errno.ENOSPC != errno.EIO


def test_a_run_whose_creation_fails_leaves_nothing_behind(
    tmp_path: Path, faults: dict[str, int]
) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> None:
        return None

    engine = Engine(LocalWorld(tmp_path), {"flow": flow})
    faults["enospc"] = 1
    with pytest.raises(StorageError, match="rolled back"):
        asyncio.run(engine.start("flow", run_id="doomed"))
    assert not (tmp_path / "runs" / "doomed").exists()
    assert asyncio.run(engine.start("flow", run_id="doomed")) == "doomed"


def test_reserved_space_ends_the_records_and_is_given_back(tmp_path: Path) -> None:
    path = tmp_path / "journal.msgpack"
    writer = _journal.Writer(str(path), 0, reserve=True)
    early = [_journal.header()] + [{"t": "e"}] * (_journal.RESERVE_AFTER - 1)
    offsets = [writer.append(_journal.frame(r)) for r in early]
    assert path.stat().st_size == writer.end  # a short-lived writer reserves nothing
    offsets.append(writer.append(_journal.frame({"t": "a"})))
    end = writer.end
    # Reserved from the next append on, past what it wrote: allocated ahead, in the file.
    assert path.stat().st_size == end + _journal.RESERVE
    result = _journal.read_file(str(path))
    assert [pos for pos, _ in result.records] == offsets
    assert (result.end, result.torn) == (end, False)  # zeros are where the records stop
    with open(path, "rb") as f:  # still plain msgpack: each zero byte reads as the integer 0
        frames = list(msgpack.Unpacker(f, raw=False))
    records = len(offsets)
    assert len(frames) == records + _journal.RESERVE and set(frames[records:]) == {0}
    data = path.read_bytes()
    path.write_bytes(data[:end] + b"\x93\x01" + data[end + 2 :])  # a record begun, then zeros
    torn = _journal.read_file(str(path))
    assert (torn.end, torn.torn) == (end, True)
    path.write_bytes(data)
    offsets.append(writer.append(_journal.frame({"t": "b"})))
    for _ in range(_journal.RESERVE // 100):  # past the reserved space: more is reserved
        writer.append(_journal.frame({"t": "c", "pad": "x" * 100}))
    assert path.stat().st_size > writer.end > _journal.RESERVE
    assert _journal.read_file(str(path)).end == writer.end
    writer.close()
    assert path.stat().st_size == writer.end  # given back
    again = _journal.Writer(str(path), offsets[-1])  # a killed writer's space is dropped
    again.close()
    assert path.stat().st_size == offsets[-1]


def test_a_killed_owners_reserved_space_is_harmless(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import textwrap

    from world import verify

    data = tmp_path / "data"
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from world import Engine, LocalWorld

        async def job(ctx, n):
            for i in range(n):
                await ctx.step(f"s{{i}}", lambda i=i: i)
            await ctx.step("hang", lambda: print("ready", flush=True) or asyncio.sleep(60))
            return "done"

        async def main():
            engine = Engine(LocalWorld({str(data)!r}), {{"job": job}})
            if "start" in sys.argv:
                await engine.start("job", 20, run_id="job")
            await engine.run("job")

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, "start"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    journal = data / "runs" / "job" / "journal.msgpack"
    end = _journal.read_file(str(journal)).end
    assert journal.stat().st_size > end  # the owner died holding reserved space
    assert [f.state for f in verify(data) if f.path.endswith("journal.msgpack")] == ["ok"]
    records = [rec for _, rec in _journal.read_file(str(journal)).records]
    assert [r.get("name") for r in records if r.get("t") == "step"] == [f"s{i}" for i in range(20)]

    async def finish() -> None:
        async def job(ctx: WorkflowContext, n: int) -> str:
            for i in range(n):
                await ctx.step(f"s{i}", lambda i=i: i)
            await ctx.step("hang", lambda: None)
            return "done"

        world = LocalWorld(data)
        try:
            info = await Engine(world, {"job": job}).run("job")
            assert (info.status, info.result) == ("completed", "done")
        finally:
            world.close()

    asyncio.run(finish())
    assert journal.stat().st_size == _journal.read_file(str(journal)).end


def test_a_deferred_record_is_durable_before_anything_that_follows_it_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _journal.can_defer():
        pytest.skip("this system cannot start a write without waiting for it")
    world = LocalWorld(tmp_path / "data")
    seen: dict[str, list[tuple[str, str]]] = {}
    log: list[tuple[str, str]] = []  # every pwrite and fdatasync once the run begins

    def effect(name: str) -> int:
        seen[name] = list(log)
        return 1

    async def quiet(name: str) -> int:
        seen[name] = list(log)
        # The records before it are durable EFFECT_WAIT after it began at the latest (a
        # quick one's next effect makes them so first, with its own records).
        await asyncio.sleep(EFFECT_WAIT * 5)
        seen[name + " waited"] = list(log)
        return 2

    async def flow(ctx: WorkflowContext, _: None) -> None:
        await ctx.step("a", effect, "a")
        world.stream_append("events.s1", {"after": "a"})  # derived from a's result
        await ctx.step("b", effect, "b")
        await ctx.step("q", quiet, "q", ordered=False)
        await ctx.step("c", effect, "c")

    engine = Engine(world, {"flow": flow})
    rid = asyncio.run(engine.start("flow"))
    log = io_log(monkeypatch)
    asyncio.run(engine.run(rid))
    world.close()

    def synced_after_last_write(events: list[tuple[str, str]]) -> bool:
        # A commit is one entry of the family's write-ahead file and its sync: it covers
        # every record written into the journal before it (`wal`).
        writes = [i for i, e in enumerate(events) if e == ("write", "wal.msgpack")]
        syncs = [i for i, e in enumerate(events) if e == ("sync", "wal.msgpack")]
        journal = [i for i, e in enumerate(events) if e == ("write", "journal.msgpack")]
        return bool(writes) and bool(syncs) and syncs[-1] > max(writes[-1], journal[-1])

    # An ordered step's function runs only once every record before it is durable ...
    assert synced_after_last_write(seen["b"]) and synced_after_last_write(seen["c"])
    # ... and the stream item that follows a's record is written only after it is durable.
    # (The stream file's header is written when its first item is appended; the item itself
    # is the file's last write.)
    item = max(i for i, e in enumerate(log) if e == ("write", "events.s1.msgpack"))
    assert synced_after_last_write(log[:item])
    # An unordered step may begin first; the records are durable soon after.
    assert synced_after_last_write(seen["q waited"])
    # One fsync for b's record and a's item's stream is the whole cost of the overlap (one
    # commit: their entry in the write-ahead file).
    assert log.count(("sync", "wal.msgpack")) <= log.count(("write", "journal.msgpack"))


@pytest.mark.parametrize("wait", [0.5, 0.0])
def test_a_quick_unobserved_step_shares_the_next_steps_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait: float
) -> None:
    # A model that waits a moment for its answer (the loop turns), then a tool: the records
    # and items before the model's call wait for the tool's effect, one fdatasync for both.
    # (0.5 s, not 2 ms, so a loaded machine's stall does not split them; 0: they are split.)
    monkeypatch.setattr("world.stores.local.world.EFFECT_WAIT", wait)
    world = LocalWorld(tmp_path / "data")
    rounds = 10

    async def model() -> int:
        await asyncio.sleep(0.001)
        return 1

    async def flow(ctx: WorkflowContext, _: None) -> None:
        for i in range(rounds):
            world.stream_append("events.s1", {"step": i})
            await ctx.step(f"model{i}", model, ordered=False)
            await ctx.step(f"tool{i}", lambda: 2)

    engine = Engine(world, {"flow": flow})
    rid = asyncio.run(engine.start("flow"))
    log = io_log(monkeypatch)
    asyncio.run(engine.run(rid))
    world.close()
    syncs = synced(log).count("wal.msgpack")  # a commit: one entry of the write-ahead file
    if wait:
        assert syncs <= rounds + 2  # one a round (and the run's end)
    else:
        assert syncs >= 2 * rounds  # the model's wait wrote the items: a second a round


def test_reading_another_stream_does_not_commit_a_familys_open_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A step's items wait in an open batch for the family's next commit (the tool's effect):
    # a read of one of the family's other streams in between (a turn reads its own streams)
    # sees that stream as stored and commits nothing; a read of the batched stream itself
    # commits the batch first, and sees its items.
    world = LocalWorld(tmp_path / "data")
    rounds = 10
    seen: list[tuple[int, int]] = []

    async def flow(ctx: WorkflowContext, _: None) -> None:
        events, other = f"events.{ctx.run_id}", f"other.{ctx.run_id}"  # the family's
        await ctx.step("first", lambda: world.stream_append(other, {"n": 0}))
        for i in range(rounds):
            for part in range(2):
                world.stream_append(events, {"step": i, "part": part})
                seen.append((world.stream_length(other), len(world.stream_read(other))))
            await ctx.step(f"tool{i}", lambda: 2)
        world.stream_append(events, {"step": "last"})
        seen.append((world.stream_length(events), len(world.stream_read(events))))

    engine = Engine(world, {"flow": flow})
    rid = asyncio.run(engine.start("flow"))
    log = io_log(monkeypatch)
    asyncio.run(engine.run(rid))
    world.close()
    assert seen == [(1, 1)] * 2 * rounds + [(2 * rounds + 1, 2 * rounds + 1)]
    # One commit a round (the tool's), the first step's, the last read's and the run's end.
    assert synced(log).count("wal.msgpack") <= rounds + 3


def test_a_deferred_record_the_disk_refuses_fails_the_run_and_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    if not _journal.can_defer():
        pytest.skip("this system cannot start a write without waiting for it")
    world = LocalWorld(tmp_path / "data")
    ran: list[str] = []

    async def flow(ctx: WorkflowContext, _: None) -> None:
        await ctx.step("a", ran.append, "a")
        await ctx.step("b", ran.append, "b")

    engine = Engine(world, {"flow": flow})
    rid = asyncio.run(engine.start("flow"))
    journal = tmp_path / "data" / "runs" / rid / "journal.msgpack"
    before = _journal.read_file(str(journal)).end
    real = os.fdatasync
    calls = {"n": 0}

    def failing(fd: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name == "wal.msgpack":
            calls["n"] += 1
            if calls["n"] == 1:  # the commit of a's record, before b runs
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(StorageError, match="write failed"):
        asyncio.run(engine.run(rid))
    monkeypatch.setattr(os, "fdatasync", real)
    assert ran == ["a"]  # b never ran on a record that is not durable
    world.close()
    assert _journal.read_file(str(journal)).end == before  # a's record rolled back
    again = LocalWorld(tmp_path / "data")
    info = asyncio.run(Engine(again, {"flow": flow}).run(rid))
    assert info.status == "completed" and ran == ["a", "a", "b"]
    again.close()


def test_the_usage_a_head_note_asks_for_is_the_journals_data_not_its_reserved_space(
    tmp_path: Path,
) -> None:
    import os

    async def many(ctx: WorkflowContext, n: int) -> int:
        for i in range(n):
            await ctx.step(f"s{i}", lambda i=i: i)
        return n

    world = LocalWorld(tmp_path / "data")
    engine = Engine(world, {"many": many})
    rid = asyncio.run(engine.start("many", 3 * _journal.RESERVE_AFTER, run_id="many"))
    journal = tmp_path / "data" / "runs" / rid / "journal.msgpack"
    sizes: list[tuple[int, int]] = []

    def note(root: str) -> None:
        usage = world.family_usage(root, streams=[])  # what a note reports (eve: its size)
        others = sum(p.stat().st_size for p in journal.parent.iterdir() if p != journal)
        sizes.append((usage.bytes - others, os.stat(journal).st_size))

    engine.head_note = note
    assert asyncio.run(engine.run(rid)).status == "completed"
    world.close()
    end = _journal.read_file(str(journal)).end
    assert sizes and sizes[-1] == (end, end) and journal.stat().st_size == end


def test_a_power_cut_that_zeroed_whole_blocks_of_the_last_record_is_a_torn_tail(
    tmp_path: Path,
) -> None:
    # A cut may keep a file's size but not its last blocks: they read as zeros. Zeros from a
    # block boundary inside the last record to the end are a write cut short; zeros from
    # anywhere else in a whole record (its own bytes, say) are not.
    path = tmp_path / "j.msgpack"
    head = _journal.frame(_journal.header())
    first = _journal.frame({"t": "start", "x": "a" * 100})
    last = _journal.frame({"t": "step", "x": "b" * 2000})
    whole = head + first + last
    start = len(head) + len(first)
    block = (start // _journal.BLOCK + 1) * _journal.BLOCK  # the first boundary inside `last`
    path.write_bytes(whole[:block] + bytes(len(whole) - block))
    torn = _journal.read_file(str(path))
    assert torn.torn and torn.end == start and len(torn.records) == 2
    path.write_bytes(whole[: block + 7] + bytes(len(whole) - block - 7))  # not at a boundary
    with pytest.raises(CorruptJournalError) as err:
        _journal.read_file(str(path))
    assert err.value.offset == start
