"""A full disk (a real one: a small tmpfs) gives one StorageError saying what, which file, and
that nothing stored was lost; once there is space again everything stored before is there and
the store goes on."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.power_cut import fill, small_disk
from world import LocalWorld, StorageError, encode

__all__ = ["small_disk"]  # the fixture, used here


BIG = "x" * (64 << 10)  # more than any page's slack: needs new space


def test_a_full_disk_is_one_clear_error_and_loses_nothing(small_disk: Path) -> None:
    data = small_disk / "data"
    world = LocalWorld(data)
    world.create_family("r1", [encode({"t": "note", "i": 0})])
    world.stream_append("s", {"i": 0})
    world.deliver("r1", "tok", {"i": 0})
    world.append("r1", [encode({"t": "note", "i": 1})])
    filler = fill(small_disk)

    def stream() -> None:
        world.stream_append("s", {"big": BIG})
        world._streams.flush()

    attempts: dict[str, Callable[[], object]] = {
        "stream": stream,
        "journal": lambda: world.append("r1", [encode({"t": "note", "big": BIG})]),
        "inbox": lambda: world.deliver("r1", "tok", {"big": BIG}),
        "head": lambda: world.write_head("r1", {"status": "running", "big": BIG}),
        "run": lambda: world.create_family("r2", [encode({"t": "note", "big": BIG})]),
        "stream file": lambda: world.stream_append("new", {"big": BIG}),
    }
    for what, attempt in attempts.items():
        with pytest.raises(StorageError) as caught:
            attempt()
        message = str(caught.value)
        assert str(data) in message, f"{what}: names no file: {message}"
        assert "no space left on" in message.lower(), f"{what}: {message}"
        assert "nothing stored before was lost" in message, f"{what}: {message}"
        assert "\n" not in message

    filler.unlink()
    again = LocalWorld(data)
    records = [rec for _, rec in again.load("r1").records]
    assert [r.get("i") for r in records] == [0, 1]
    assert again.stream_read("s") == [{"i": 0}]
    assert [item.payload for item in again.read_inbox("r1")[0]] == [{"i": 0}]
    assert not again.family_exists("r2")
    assert again.stream_append("s", {"i": 1}) == 1
    again.append("r1", [encode({"t": "note", "i": 2})])
    assert [r.get("i") for _, r in LocalWorld(data).load("r1").records] == [0, 1, 2]
    world.close()
    again.close()


def test_too_many_open_files_is_the_process_limit_not_the_disk(tmp_path: Path) -> None:
    import resource

    world = LocalWorld(tmp_path / "data")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.open(os.devnull, os.O_RDONLY)  # the number the next open would take
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))  # so no file opens
    try:
        with pytest.raises(StorageError) as err:
            world.create_family("r_1", [])
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "too many open files" in str(err.value) and "ulimit -n" in str(err.value)
    assert "disk" not in str(err.value)
    world.close()
