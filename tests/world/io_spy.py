"""Records the file writes and syncs of this process (the order durability depends on)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def io_log(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``("write" | "sync", file name)`` of every ``os.pwrite`` and ``os.fdatasync`` from now
    on (until the monkeypatch is undone)."""
    log: list[tuple[str, str]] = []
    real_pwrite, real_sync = os.pwrite, os.fdatasync

    def name(fd: int) -> str:
        return Path(os.readlink(f"/proc/self/fd/{fd}")).name

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        log.append(("write", name(fd)))
        return real_pwrite(fd, data, offset)

    def fdatasync(fd: int) -> None:
        log.append(("sync", name(fd)))
        real_sync(fd)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return log


def synced(log: list[tuple[str, str]]) -> list[str]:
    """The files ``log`` synced, in order."""
    return [name for call, name in log if call == "sync"]
