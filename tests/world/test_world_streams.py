"""Streams on every World: append, read (negative start), length, live tail."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import pytest
from watchfiles._rust_notify import WatchfilesRustInternalError

from tests.world.io_spy import io_log, synced
from world import CorruptJournalError, Engine, InvalidNameError, LocalWorld, WorkflowContext, World


def test_append_read_length(world: World) -> None:
    for i in range(5):
        item = {"i": i, "at": dt.date(2024, 1, i + 1)}
        assert world.stream_append("session:abc.events", item) == i
    assert world.stream_length("session:abc.events") == 5
    assert [e["i"] for e in world.stream_read("session:abc.events")] == [0, 1, 2, 3, 4]
    assert [e["i"] for e in world.stream_read("session:abc.events", 2, 4)] == [2, 3]
    assert [e["i"] for e in world.stream_read("session:abc.events", -2)] == [3, 4]
    assert world.stream_read("session:abc.events", 7) == []
    assert world.stream_read("never-written") == [] and world.stream_length("never-written") == 0


@pytest.mark.parametrize("name", [".hidden", "a/b", "", "x" * 201, "sp ace", "../up"])
def test_bad_stream_names_are_refused(world: World, name: str) -> None:
    with pytest.raises(InvalidNameError):
        world.stream_append(name, 1)


def test_tail_yields_stored_then_live_items(world: World) -> None:
    world.stream_append("tail", "a")
    world.stream_append("tail", "b")

    async def main() -> list[tuple[int, Any]]:
        seen: list[tuple[int, Any]] = []

        async def consume() -> None:
            async for index, item in world.stream_tail("tail", -1):
                seen.append((index, item))
                if item == "d":
                    return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        world.stream_append("tail", "c")
        await asyncio.sleep(0.05)
        world.stream_append("tail", "d")
        await asyncio.wait_for(task, 10)
        return seen

    assert asyncio.run(main()) == [(1, "b"), (2, "c"), (3, "d")]


def test_index_is_rebuilt_when_lost_or_short(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    for i in range(6):
        world.stream_append("s", i)
    world.close()
    idx = tmp_path / "data" / "streams" / "s.idx"
    idx.write_bytes(idx.read_bytes()[:14])  # as if killed between data and index writes
    fresh = LocalWorld(tmp_path / "data")
    assert fresh.stream_read("s", -2) == [4, 5] and fresh.stream_length("s") == 6
    idx.unlink()
    assert fresh.stream_read("s") == list(range(6))
    assert fresh.stream_append("s", 6) == 6
    assert len(idx.read_bytes()) == 8 + 7 * 4  # its mark, then 4-byte offsets
    data = tmp_path / "data" / "streams" / "s.msgpack"
    data.write_bytes(data.read_bytes()[:-3])  # torn last item
    other = LocalWorld(tmp_path / "data")
    assert other.stream_read("s") == list(range(6))
    assert other.stream_append("s", "x") == 6
    assert other.stream_read("s", -1) == ["x"]


def test_reads_keep_offsets_while_the_file_is_unchanged_and_complete_them_as_it_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world import _journal
    from world.stores.local import stream_index as _stream_index
    from world.stores.local import streams as _streams

    world, writer = LocalWorld(tmp_path / "data"), LocalWorld(tmp_path / "data")
    for i in range(50):
        writer.stream_append("s", i)
    assert world.stream_read("s", -1) == [49]
    index_reads: list[int] = []
    starts: list[int] = []
    real_offsets, real_read_file = _stream_index.offsets_of, _journal.read_file

    def offsets(data: bytes) -> Any:
        index_reads.append(len(data))
        return real_offsets(data)

    def read_file(path: str, start: int = 0) -> Any:
        starts.append(start)
        return real_read_file(path, start)

    monkeypatch.setattr(_streams, "offsets_of", offsets)
    monkeypatch.setattr(_journal, "read_file", read_file)
    for _ in range(3):
        assert world.stream_length("s") == 50 and world.stream_read("s", 10, 12) == [10, 11]
    assert index_reads == [] and starts == []  # a stat each time, no index or tail read
    writer.stream_append("s", 50)  # another writer: the file grew
    assert world.stream_read("s", -2) == [49, 50]
    assert index_reads == [] and len(starts) == 1 and starts[0] > 0  # only the new bytes
    world.stream_append("s", 51)  # its own append keeps what it knows current
    starts.clear()
    assert world.stream_length("s") == 52 and world.stream_read("s", -1) == [51]
    assert starts == []
    data = tmp_path / "data" / "streams" / "s.msgpack"
    idx = (tmp_path / "data" / "streams" / "s.idx").read_bytes()
    data.write_bytes(data.read_bytes()[: int.from_bytes(idx[-4:], "little")])  # cut item 51
    assert world.stream_length("s") == 51 and world.stream_read("s", -1) == [50]
    world.close()
    writer.close()


def test_appends_on_a_loop_are_written_together_at_its_next_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world.stores.local import streams as _streams

    writes: list[int] = []
    real_write = _streams.StreamStore._write

    def counting_write(
        self: Any, name: str, writer: Any, frames: list[bytes], *a: Any, **kw: Any
    ) -> int:
        writes.append(len(frames))
        return real_write(self, name, writer, frames, *a, **kw)

    monkeypatch.setattr(_streams.StreamStore, "_write", counting_write)
    world = LocalWorld(tmp_path / "data")
    reader = LocalWorld(tmp_path / "data")

    async def main() -> None:
        assert [world.stream_append("s", i) for i in range(5)] == [0, 1, 2, 3, 4]
        assert reader.stream_length("s") == 0 and writes == []  # not written yet
        await asyncio.sleep(0)
        assert writes == [5] and reader.stream_read("s") == [0, 1, 2, 3, 4]
        world.stream_append("s", 5)
        assert world.stream_read("s", -1) == [5]  # its own reads write the batch first
        world.stream_append("s", 6)
        world.before_effect()  # as a step does before its function runs
        assert reader.stream_read("s", -2) == [5, 6] and writes == [5, 1, 1]

    asyncio.run(main())
    world.close()
    reader.close()


def test_a_step_writes_the_items_before_it_first_unless_it_is_not_ordered(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    reader = LocalWorld(tmp_path / "data")
    seen: dict[str, int] = {}

    async def flow(ctx: WorkflowContext, _: Any) -> int:
        world.stream_append("s", 0)

        def look(name: str) -> None:
            seen[name] = reader.stream_length("s")  # what another process sees meanwhile

        await ctx.step("quiet", look, "quiet", ordered=False)  # e.g. a model call
        await ctx.step("tool", look, "tool")  # an effect someone may see: items first
        return 0

    engine = Engine(world, {"flow": flow})

    async def main() -> None:
        await engine.run(await engine.start("flow"))

    asyncio.run(main())
    assert seen == {"quiet": 0, "tool": 1}
    world.close()
    reader.close()


def test_a_batch_holds_the_stream_lock_so_other_writers_append_after_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    world, other = LocalWorld(data), LocalWorld(data)
    code = (
        "import sys; from world import LocalWorld; w = LocalWorld(sys.argv[1]);"
        "print(w.stream_append('s', 'theirs'), flush=True)"
    )

    async def main() -> int:
        world.stream_append("s", "a")
        world.stream_append("s", "b")
        proc = subprocess.Popen([sys.executable, "-c", code, str(data)], stdout=subprocess.PIPE)
        time.sleep(1.0)  # the loop does not turn: the batch stays open, its lock held
        assert proc.poll() is None  # it waits for the batch's lock
        # Ours does not deadlock behind the batch of this process: the batch is written and
        # its lock released, and then ours and the waiting process's race for the lock
        # (`flock` is not FIFO): either may come first, both after the batch.
        ours = other.stream_append("s", "same process")
        await asyncio.sleep(0)
        out, _ = proc.communicate(timeout=30)
        assert {ours, int(out.decode())} == {2, 3}
        return ours

    ours = asyncio.run(main())
    after = ["same process", "theirs"] if ours == 2 else ["theirs", "same process"]
    assert LocalWorld(data).stream_read("s") == ["a", "b", *after]
    world.close()
    other.close()


def test_a_batch_that_cannot_be_written_fails_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from world import StorageError

    world = LocalWorld(tmp_path / "data")
    world.stream_append("s", "kept")  # not on a loop: written at once
    real_pwrite = os.pwrite

    def full_disk(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async def main() -> None:
        world.stream_append("s", "lost")
        monkeypatch.setattr(os, "pwrite", full_disk)
        await asyncio.sleep(0)  # the batch is written now, and fails
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        with pytest.raises(
            StorageError,
            match=r"s\.msgpack: no space left on the device while appending 1 item\(s\) to "
            r"stream 's'; nothing stored before was lost",
        ):
            world.stream_append("s", "next")
        assert world.stream_append("s", "after") == 1  # the store goes on from what is stored

    asyncio.run(main())
    assert LocalWorld(tmp_path / "data").stream_read("s") == ["kept", "after"]
    world.close()


def _tail(world: World, name: str) -> AsyncGenerator[tuple[int, Any], None]:
    """`World.stream_tail`, closable: every world's tail is an async generator."""
    return cast("AsyncGenerator[tuple[int, Any], None]", world.stream_tail(name))


def _watch_threads() -> int:
    return sum(t.name.startswith("eve-watch") for t in threading.enumerate())


def test_idle_tails_share_one_watcher_thread_and_leave_the_executor_free(tmp_path: Path) -> None:
    # Each idle tail used to hold a thread of the loop's default executor (six on two cores)
    # and an inotify instance of its own (the kernel allows 128 per user): a server following
    # many streams starved other work of threads, and could not open a 129th stream.
    world = LocalWorld(tmp_path / "data")
    count = 150
    seen: list[int] = []

    async def follow(i: int) -> None:
        async with contextlib.aclosing(_tail(world, f"s{i}")) as items:
            async for _, item in items:
                seen.append(item)
                return

    async def main() -> None:
        tasks = [asyncio.create_task(follow(i)) for i in range(count)]
        await asyncio.sleep(0)  # every tail has read its empty stream and waits
        loop = asyncio.get_running_loop()
        assert await asyncio.wait_for(loop.run_in_executor(None, str, "free"), 5) == "free"
        assert _watch_threads() == 1
        for i in range(count):
            world.stream_append(f"s{i}", i)
        await asyncio.wait_for(asyncio.gather(*tasks), 20)

    asyncio.run(main())
    assert sorted(seen) == list(range(count))
    deadline = time.monotonic() + 10
    while _watch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)  # the thread notices its stop within one step of the notify loop
    assert _watch_threads() == 0


def test_tail_across_processes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    world = LocalWorld(data)
    code = (
        "import sys, time; from world import LocalWorld; w = LocalWorld(sys.argv[1]);"
        "[(w.stream_append('x', i), time.sleep(0.02)) for i in range(5)]"
    )

    async def main() -> list[int]:
        seen: list[int] = []
        proc = subprocess.Popen([sys.executable, "-c", code, str(data)])

        async def consume() -> None:
            async for _, item in world.stream_tail("x"):
                seen.append(item)
                if len(seen) == 5:
                    return

        try:
            await asyncio.wait_for(consume(), 20)
        finally:
            proc.wait(10)
        return seen

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]


def test_stream_appends_are_made_durable_before_the_next_journal_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = LocalWorld(tmp_path / "data")

    async def flow(ctx: WorkflowContext, _: None) -> None:
        await ctx.step("emit", lambda: world.stream_append("events.s1", {"e": 1}))

    engine = Engine(world, {"flow": flow})
    rid = asyncio.run(engine.start("flow"))
    log = io_log(monkeypatch)
    asyncio.run(engine.run(rid))
    files = synced(log)  # (a stream of another family: synced, then the record committed)
    assert files[:2] == ["events.s1.msgpack", "wal.msgpack"]


def test_stream_appends_are_made_durable_before_a_fork_family_appears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = LocalWorld(tmp_path / "data")

    async def flow(ctx: WorkflowContext, _: None) -> None:
        await ctx.sleep(3600)

    engine = Engine(world, {"flow": flow})
    rid = asyncio.run(engine.start("flow"))
    asyncio.run(engine.run(rid))  # parked: it can be forked
    log = io_log(monkeypatch)
    world.stream_append("forks:" + rid, {"session": "dup"})  # no record makes it durable
    asyncio.run(engine.fork(rid, "dup"))
    files = synced(log)
    journal = next(n for n, f in enumerate(files) if f.startswith("journal.msgpack.tmp"))
    assert files.index(f"forks%3A{rid}.msgpack") < journal


def test_a_steps_record_waits_only_for_the_streams_its_function_appended_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = LocalWorld(tmp_path / "data")

    async def flow(ctx: WorkflowContext, _: None) -> None:
        world.stream_append("history.s1", {"h": 1})  # workflow code: a replay appends it again
        await ctx.step("emit", lambda: world.stream_append("events.s1", {"e": 1}))
        await ctx.step("quiet", lambda: None)

    engine = Engine(world, {"flow": flow})
    rid = asyncio.run(engine.start("flow"))
    log = io_log(monkeypatch)
    asyncio.run(engine.run(rid))
    files = synced(log)
    # The first record waits for the stream its step appended to, not for the other (made
    # durable before the next step runs); the run's end for what is left. (Streams of
    # another family: the record's commit is its family's write-ahead file.)
    assert files[:2] == ["events.s1.msgpack", "wal.msgpack"]
    assert "history.s1.msgpack" in files[2:] and files[-1] == "journal.msgpack"


def test_a_tail_polls_when_the_system_has_no_watcher_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of inotify instances (128 per user by default, shared by every program), a live
    tail and an inbox wait still wake up, for appends within the same second too."""
    import watchfiles._rust_notify

    refused: list[str] = []

    def refusing(paths: list[str], *rest: Any) -> Any:
        refused.extend(paths)
        raise WatchfilesRustInternalError(
            "Error creating recommended watcher: Too many open files (os error 24)"
        )

    monkeypatch.setattr(watchfiles._rust_notify, "RustNotify", refusing)
    world = LocalWorld(tmp_path / "data")
    sid = "s_" + "a" * 24
    world.create_family(sid, [])

    async def main() -> tuple[list[Any], bool, bool]:
        seen: list[Any] = []

        async def consume() -> None:
            async for _, item in world.stream_tail("tail"):
                seen.append(item)
                if len(seen) == 3:
                    return

        task = asyncio.create_task(consume())
        for item in "abc":
            await asyncio.sleep(0.1)
            world.stream_append("tail", item)
        await asyncio.wait_for(task, 10)
        mark = world.inbox_end(sid)
        quiet = await world.wait_inbox(sid, mark, 0.2)
        woken = asyncio.create_task(world.wait_inbox(sid, mark, 10))
        await asyncio.sleep(0.1)
        world.deliver(sid, "tok", {"kind": "message", "text": "x"})
        return seen, quiet, await asyncio.wait_for(woken, 10)

    assert asyncio.run(main()) == (["a", "b", "c"], False, True)
    assert refused  # the notify watcher really was refused


def test_digest_covers_a_prefix_and_changes_with_its_bytes(world: World) -> None:
    assert world.stream_digest("dig", 0) is not None and world.stream_digest("dig", 1) is None
    for i in range(4):
        world.stream_append("dig", {"i": i})
    two = world.stream_digest("dig", 2)
    assert two is not None and two != world.stream_digest("dig", 3)
    world.stream_append("dig", {"i": 4})
    assert world.stream_digest("dig", 2) == two  # appends leave a prefix's digest alone
    assert world.stream_digest("dig", 6) is None
    if isinstance(world, LocalWorld):
        data = world.path / "streams" / "dig.msgpack"
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 3] ^= 0xFF  # inside the first items
        data.write_bytes(bytes(raw))
        assert world.stream_digest("dig", 2) != two


def _summed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the byte strings crc32'd from now on (the stream store's digests call
    `zlib.crc32`)."""
    import zlib

    summed: list[int] = []
    real = zlib.crc32

    def crc32(data: bytes, crc: int = 0) -> int:
        summed.append(len(data))
        return real(data, crc)

    monkeypatch.setattr(zlib, "crc32", crc32)
    return summed


def test_a_digest_reads_only_what_was_appended_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = LocalWorld(tmp_path / "data")
    summed = _summed(monkeypatch)
    for i in range(50):
        world.stream_append("dig", {"i": i, "pad": "x" * 100})
    first = world.stream_digest("dig", 50)
    whole = summed.pop()
    for i in range(50, 52):
        world.stream_append("dig", {"i": i, "pad": "x" * 100})
    assert world.stream_digest("dig", 50) == first and summed.pop() == 0  # nothing read again
    grown = world.stream_digest("dig", 52)
    assert summed.pop() < whole / 10  # only the two new items
    fresh = LocalWorld(tmp_path / "data")  # a store that saw none of it reads it all
    assert fresh.stream_digest("dig", 52) == grown and summed.pop() > whole
    data = tmp_path / "data" / "streams" / "dig.msgpack"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # changed by someone else, same size
    data.write_bytes(bytes(raw))
    assert world.stream_digest("dig", 52) != grown  # seen: the file is not as it was
    fresh.close()
    world.close()


def test_digests_of_prefixes_asked_in_turn_read_only_what_came_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two readers checking different prefixes of one stream in turn (a session's view its
    kept count, a turn's checkpoint a later one) each read only the items since the longest
    prefix checked that fits, not the stream from its start."""
    world = LocalWorld(tmp_path / "data")
    summed = _summed(monkeypatch)
    for i in range(200):
        world.stream_append("dig", {"i": i, "pad": "x" * 100})
    view = world.stream_digest("dig", 200)
    whole = sum(summed)
    for turn in range(3):
        end = 200 + 10 * (turn + 1)
        for i in range(end - 10, end):
            world.stream_append("dig", {"i": i, "pad": "x" * 100})
        summed.clear()
        checkpoint = world.stream_digest("dig", end - 2)  # a later prefix first
        assert world.stream_digest("dig", end - 10) == view  # then the kept one: no read
        view = world.stream_digest("dig", end)
        assert sum(summed) < whole / 10  # the turn's items, not the stream again
        assert checkpoint is not None and view != checkpoint
    fresh = LocalWorld(tmp_path / "data")
    assert fresh.stream_digest("dig", 230) == view  # the same digest as read whole
    fresh.close()
    world.close()


def test_a_digest_continued_from_a_checked_prefix_equals_the_whole_digest(world: World) -> None:
    for i in range(5):
        world.stream_append("cont", {"i": i, "pad": "x" * i})
    two = world.stream_digest("cont", 2)
    assert two is not None
    for count in (2, 3, 5):  # continued from the first two items: the same as read whole
        assert world.stream_digest("cont", count, (2, two)) == world.stream_digest("cont", count)
    assert world.stream_digest("cont", 6, (2, two)) is None  # more items than stored
    assert world.stream_digest("cont", 5, (2, "not a digest")) == world.stream_digest("cont", 5)
    if isinstance(world, LocalWorld):  # a digest that does not end where item 2 does: ignored
        whole = world.stream_digest("cont", 5)
        assert world.stream_digest("cont", 5, (2, (1, 0))) == whole
        data = world.path / "streams" / "cont.msgpack"
        raw = bytearray(data.read_bytes())
        raw[-3] ^= 0xFF  # inside the last item: a continued digest still sees it
        data.write_bytes(bytes(raw))
        try:  # another digest, or the damage itself (a whole last item with a bad checksum)
            seen = world.stream_digest("cont", 5, (2, two)) != whole
        except CorruptJournalError:
            seen = True
        assert seen


def test_a_tail_wakes_at_an_append_of_its_own_process_without_the_notify_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world.stores.local import watch as _watch

    def deaf(self: Any) -> None:  # a notify thread that never reports anything
        self.stop.wait()
        self._notify.close()

    monkeypatch.setattr(_watch._Folder, "_run", deaf)
    world = LocalWorld(tmp_path / "data")
    world.stream_append("own", "first")

    async def main() -> list[Any]:
        seen: list[Any] = []

        async def follow() -> None:
            async with contextlib.aclosing(_tail(world, "own")) as items:
                async for _, item in items:
                    seen.append(item)
                    if len(seen) == 3:
                        return

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.05)  # the tail has read what is stored and waits
        world.stream_append("own", "second")  # on the loop: written at its next turn
        await asyncio.sleep(0.05)
        await asyncio.to_thread(world.stream_append, "own", "third")  # off the loop: at once
        await asyncio.wait_for(task, 5)
        return seen

    assert asyncio.run(main()) == ["first", "second", "third"]
    world.close()


def test_a_new_index_holds_4_byte_offsets_and_an_8_byte_one_still_reads_and_grows(
    tmp_path: Path,
) -> None:
    from array import array

    from world.stores.local import stream_index as _stream_index
    from world.stores.local import verify as _verify

    folder = tmp_path / "data"
    world = LocalWorld(folder)
    for i in range(5):
        world.stream_append("s", {"i": i})
    world.close()
    idx = folder / "streams" / "s.idx"
    raw = idx.read_bytes()
    assert raw.startswith(b"eveidx4\n") and len(raw) == 8 + 5 * 4
    offsets = _stream_index.index_offsets(raw)
    idx.write_bytes(array("Q", offsets).tobytes())  # index version 1, as older eve wrote it
    old = LocalWorld(folder)
    assert old.stream_read("s", 1, 3) == [{"i": 1}, {"i": 2}] and old.stream_length("s") == 5
    assert not [f for f in _verify.verify(folder) if not f.ok]
    assert old.stream_append("s", {"i": 5}) == 5
    old.close()
    assert len(idx.read_bytes()) == 6 * 8  # it stays in its form
    assert LocalWorld(folder).stream_read("s", -2) == [{"i": 4}, {"i": 5}]
    assert not [f for f in _verify.verify(folder) if not f.ok]
    idx.write_bytes(idx.read_bytes()[:-8] + (7).to_bytes(8, "little"))  # a wrong last entry
    assert [f.kind for f in _verify.verify(folder) if not f.ok] == ["index"]
    _verify.repair(folder)  # rewritten in the form it has (a writer may hold it open)
    assert len(idx.read_bytes()) == 6 * 8 and not idx.read_bytes().startswith(b"eveidx4\n")
    assert not [f for f in _verify.verify(folder) if not f.ok]


def test_an_index_past_the_4_byte_limit_is_rewritten_in_8_byte_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world.stores.local import stream_index as _stream_index
    from world.stores.local import verify as _verify

    monkeypatch.setattr(_stream_index, "NARROW_LIMIT", 200)  # as if the data passed 4 GiB
    folder = tmp_path / "data"
    world = LocalWorld(folder)
    for i in range(12):
        world.stream_append("s", "x" * 20 + str(i))
    world.close()
    raw = (folder / "streams" / "s.idx").read_bytes()
    assert not raw.startswith(b"eveidx4\n") and len(raw) == 12 * 8
    assert max(_stream_index.index_offsets(raw)) >= 200
    fresh = LocalWorld(folder)
    assert fresh.stream_read("s") == ["x" * 20 + str(i) for i in range(12)]
    assert not [f for f in _verify.verify(folder) if not f.ok]
    _verify.repair(folder)  # nothing to repair; a rebuilt index would take the same form
    assert (folder / "streams" / "s.idx").read_bytes() == raw


def test_a_held_familys_open_batch_is_counted_and_read_without_committing_it(
    tmp_path: Path,
) -> None:
    """A stream of a family held here, with an open batch (the flock held, the items the
    family's next commit's): its length, items and digest include the batch's without
    committing the family first (a turn's start read its history so, one commit a turn), and
    are what the files say once the batch is written. Another reader (not the family's drive)
    still sees only what a commit made durable."""
    from world import _journal
    from world._world import DRIVING
    from world.stores.local.streams import StreamStore

    store = StreamStore(tmp_path / "streams")
    commits: list[set[str]] = []

    def commit(roots: set[str], wait: bool) -> None:
        commits.append(roots)
        store.put(store.take("r"), stored=True)

    store.held, store.commit_families = (lambda root: root == "r"), commit
    name = "events.r"
    for i in range(3):
        store.append(name, _journal.frame({"v": {"i": i}}))
    store.put(store.take("r"), stored=True)  # items 0-2 in the file
    before = store.digest(name, 3)
    store.append(name, _journal.frame({"v": {"i": 3}}))
    store.append(name, _journal.frame({"v": {"i": 4}}))  # 3-4 in the open batch
    assert store.holds("r")
    driving = DRIVING.set("r")  # as the engine's drive of family r
    assert store.length(name) == 5
    assert [x["i"] for x in store.read(name)] == [0, 1, 2, 3, 4]
    assert [x["i"] for x in store.read(name, -2)] == [3, 4]
    spans = store.read_spans(name, [(1, 2), (2, 4), (4, 9)])
    assert [[x["i"] for x in span] for span in spans] == [[1], [2, 3], [4]]
    assert store.digest(name, 3) == before
    ahead = [store.digest(name, n) for n in (4, 5)]
    assert store.digest(name, 6) is None
    assert store.digest(name, 5, (3, before)) == ahead[1]  # continued from a checked prefix
    assert commits == [] and store.holds("r")  # nothing committed to read them
    store.drain()
    assert commits == [{"r"}] and not store.holds("r")
    assert [store.digest(name, n) for n in (3, 4, 5)] == [before, *ahead]
    assert [x["i"] for x in store.read(name)] == [0, 1, 2, 3, 4]
    store.append(name, _journal.frame({"v": {"i": 5}}))
    taken = store.take("r")  # being committed (another thread): 6 goes after it
    store.append(name, _journal.frame({"v": {"i": 6}}))
    store.put(taken, stored=True)
    assert store.length(name) == 7 and [x["i"] for x in store.read(name, 4)] == [4, 5, 6]
    assert len(commits) == 1
    DRIVING.reset(driving)
    assert [x["i"] for x in store.read(name)] == list(range(7)) and len(commits) == 2
    store.append(name, _journal.frame({"v": {"i": 7}}))
    assert store.length(name) == 8 and len(commits) == 3  # another reader: committed first
    store.close()
