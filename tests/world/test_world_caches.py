"""Caches a power cut may leave wrong (a stream's index, a run's head) are checked before they
are believed and rebuilt from the data, by every reader and writer; on today's ext4 a cut
typically keeps an index file's size and not its pages (zeros)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.power_cut import Disk
from world import LocalWorld, WorldError, encode
from world._store import Order
from world.stores.local import stream_index as _stream_index
from world.stores.local.stream_index import HEADER, encode_index, index_offsets

ITEMS = [{"text": f"reply {i}", "n": i} for i in range(40)]


def _stream(tmp_path: Path) -> tuple[Path, Path]:
    world = LocalWorld(tmp_path / "data")
    for item in ITEMS:
        world.stream_append("s", item)
    world.close()
    return tmp_path / "data", tmp_path / "data" / "streams" / "s.idx"


def _damage(idx: Path, how: str) -> None:
    raw = idx.read_bytes()
    offsets = index_offsets(raw)
    if how == "zeros":  # size kept, pages lost
        idx.write_bytes(bytes(len(raw)))
    elif how == "zero-tail":
        idx.write_bytes(raw[:40] + bytes(len(raw) - 40))
    elif how == "zero-middle":
        idx.write_bytes(raw[:40] + bytes(40) + raw[80:])
    elif how == "longer":  # zeros past the end (a size committed ahead of its data)
        idx.write_bytes(raw + bytes(4096))
    elif how == "stale":  # ascending, inside the file, but not where the items are
        idx.write_bytes(encode_index([offsets[0]] + [o + 3 for o in offsets[1:]]))
    elif how == "wide-zeros":  # 8-byte form of zeros after a good start
        idx.write_bytes(encode_index(offsets[:5], 8) + bytes(8 * 30))
    else:  # pragma: no cover
        raise AssertionError(how)


HOW = ["zeros", "zero-tail", "zero-middle", "longer", "stale", "wide-zeros"]


def _fresh_index(tmp_path: Path) -> bytes:
    """The index a new stream of `ITEMS` and one more item gets."""
    world = LocalWorld(tmp_path / "fresh")
    for item in [*ITEMS, {"text": "more"}]:
        world.stream_append("s", item)
    world.close()
    return (tmp_path / "fresh" / "streams" / "s.idx").read_bytes()


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_index_is_not_believed_by_a_reader(tmp_path: Path, how: str) -> None:
    data, idx = _stream(tmp_path)
    _damage(idx, how)
    reader = LocalWorld(data, create=False)  # another process's view: nothing cached
    assert reader.stream_length("s") == len(ITEMS)
    assert reader.stream_read("s") == ITEMS
    assert reader.stream_read("s", 10, 12) == ITEMS[10:12]
    assert reader.stream_read("s", -1) == ITEMS[-1:]


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_index_is_rewritten_by_the_next_writer(tmp_path: Path, how: str) -> None:
    data, idx = _stream(tmp_path)
    _damage(idx, how)
    writer = LocalWorld(data)
    assert writer.stream_append("s", {"text": "more"}) == len(ITEMS)
    writer.close()
    fresh = _fresh_index(tmp_path)
    assert index_offsets(idx.read_bytes()) == index_offsets(fresh)
    if how != "wide-zeros":  # an 8-byte index stays so
        assert idx.read_bytes() == fresh
    assert LocalWorld(data).stream_read("s") == [*ITEMS, {"text": "more"}]


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_index_read_first_is_still_rewritten_by_that_worlds_append(
    tmp_path: Path, how: str
) -> None:
    """A writer takes a reader's check of the index as its own only when the index was whole
    and right (`_Known.whole`): one a reader completed from the data is rewritten."""
    data, idx = _stream(tmp_path)
    _damage(idx, how)
    world = LocalWorld(data)
    assert world.stream_read("s") == ITEMS
    assert world.stream_append("s", {"text": "more"}) == len(ITEMS)
    world.close()
    assert index_offsets(idx.read_bytes()) == index_offsets(_fresh_index(tmp_path))


def test_a_writer_after_a_reader_of_a_whole_index_does_not_read_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world.stores.local import streams as _streams

    data, _ = _stream(tmp_path)
    world, other = LocalWorld(data), LocalWorld(data)
    assert world.stream_length("s") == len(ITEMS)
    read: list[int] = []
    real = _stream_index.offsets_of

    def offsets(raw: bytes) -> Any:
        read.append(len(raw))
        return real(raw)

    monkeypatch.setattr(_streams, "offsets_of", offsets)
    assert world.stream_append("s", {"text": "more"}) == len(ITEMS)
    assert read == []  # the reader's check stood: the files are as it saw them
    assert other.stream_length("s") == len(ITEMS) + 1
    other.stream_append("s", {"text": "other"})  # the file moved on: read and checked again
    read.clear()
    assert world.stream_append("s", {"text": "last"}) == len(ITEMS) + 2
    assert read != []
    world.close()
    other.close()
    assert LocalWorld(data).stream_read("s", -3) == [
        {"text": "more"},
        {"text": "other"},
        {"text": "last"},
    ]


@pytest.mark.parametrize("top", [0, 1, 255, 65_536, (1 << 32) - 1])
def test_a_4_byte_index_widens_to_the_offsets_it_holds(top: int) -> None:
    from array import array

    offsets = [len(HEADER), 1000, 70_000, top | 77] if top else [len(HEADER)]
    raw = encode_index(offsets)
    assert index_offsets(raw) == offsets
    assert index_offsets(raw + b"\x01\x02") == offsets  # a partial entry is left out
    assert _stream_index.offsets_of(raw).typecode == "Q"
    assert list(array("Q", array("I", raw[len(_stream_index.NARROW) :]))) == offsets


def test_a_zero_filled_head_is_not_believed(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    world.create_family("r1", [])
    world.write_head("r1", {"status": "parked"})
    head = tmp_path / "data" / "runs" / "r1" / "head.msgpack"
    assert world.read_head("r1") == {"status": "parked"}
    head.write_bytes(bytes(head.stat().st_size))
    assert LocalWorld(tmp_path / "data").read_head("r1") is None  # rebuilt from the journal


@pytest.mark.parametrize("left", [b"", bytes(39)])
def test_a_format_file_a_cut_left_unwritten_is_written_again(tmp_path: Path, left: bytes) -> None:
    world = LocalWorld(tmp_path / "data")
    world.create_family("r1", [])
    world.close()
    fmt = tmp_path / "data" / "FORMAT"
    fmt.write_bytes(left)  # as an eve that never fsync'd it left it after a cut
    assert LocalWorld(tmp_path / "data", create=False).families() == ["r1"]
    assert LocalWorld(tmp_path / "data").families() == ["r1"]
    assert fmt.read_text().startswith('{"format": "eve-world"')
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "FORMAT").write_bytes(left)  # not laid out as a store: refused
    with pytest.raises(WorldError, match="bad FORMAT"):
        LocalWorld(tmp_path / "other")


def test_every_crash_state_of_a_new_store_opens_with_what_it_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "device"
    base.mkdir()
    disk = Disk(base)
    with monkeypatch.context() as patch:
        disk.install(patch)
        world = LocalWorld(base / "a" / "data")  # its parents are new too
        opened = disk.mark("opened")
        world.create_family("r1", [])
        created = disk.mark("created")
        world.stream_append("events", {"i": 0})
        # What was appended to streams before it is durable with the record (`Order.streams`).
        world.append("r1", [encode({"t": "note"})], Order(streams=0))
        appended = disk.mark("appended")
        world.close()
    for moment in disk.moments:
        for state, choice in disk.states(moment, 3, seed=1):
            target = tmp_path / "states" / f"{moment.number}-{state}"
            disk.build(moment, choice, target)
            reopened = LocalWorld(target / "a" / "data")  # every state opens
            if moment.number + 1 >= opened:
                assert (target / "a" / "data" / "FORMAT").read_bytes().strip(b"\0")
            if moment.number + 1 >= created:
                assert reopened.families() == ["r1"], (moment.label, state)
            if moment.number + 1 >= appended:
                assert reopened.stream_read("events") == [{"i": 0}]
                assert [r["t"] for _, r in reopened.load("r1").records] == ["note"]
            reopened.close()
