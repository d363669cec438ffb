"""Journal files: plain msgpack, checksummed, torn tails discarded, corruption reported."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from world import (
    CorruptJournalError,
    Engine,
    LocalWorld,
    StorageError,
    WorkflowContext,
    _faults,
    _journal,
)


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


def test_flipped_byte_in_the_last_record_is_a_torn_tail(journal: tuple[Path, list[int]]) -> None:
    path, _ = journal
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert len(_journal.read_file(str(path)).records) == 5


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
