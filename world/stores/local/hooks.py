"""A `LocalWorld`'s hook files: `hooks/<token>` holds its owner's run id, claimed with O_EXCL
and fsync'd (with its folder) before the claim returns."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ... import _journal
from ..._errors import CorruptJournalError, StorageError
from ..._world import check_name, is_run_id, root_of
from .files import guard, read_whole


class HookFiles:
    """The hook files under `folder`."""

    def __init__(
        self, folder: Path, flush: Callable[[], None], has_family: Callable[[str], bool]
    ) -> None:
        self.folder = folder
        self.flush = flush  # makes what this process appended readable (before a claim)
        self.has_family = has_family

    def _path(self, token: str) -> Path:
        return self.folder / check_name(token, "hook token")

    def claim(self, token: str, run_id: str) -> str:
        """Claim `token` for `run_id` (O_EXCL): the owner afterwards."""
        path = self._path(token)
        with guard(path.parent, "claiming a hook"):
            for _ in range(2):
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    owner = self.owner(token)
                    if owner:
                        return owner
                    path.unlink(missing_ok=True)  # empty: its claimer died mid-claim
                    continue
                try:
                    os.write(fd, run_id.encode())
                    # What this process appended before claiming is durable with the claim (a
                    # session's creation: its session.started, by which it is listed).
                    self.flush()
                    os.fsync(fd)
                finally:
                    os.close(fd)
                _journal.fsync_dir(path.parent)
                return run_id
        raise StorageError(f"{path}: cannot claim hook token")

    def owner(self, token: str) -> str | None:
        path = os.path.join(self.folder, check_name(token, "hook token"))
        try:
            data = read_whole(path)  # (no file object: asked several times a step)
        except FileNotFoundError:
            return None
        try:
            # Empty, or zeros a power cut left under its size: its claimer died mid-claim.
            owner = data.decode("utf-8").strip().strip("\x00") or None
        except UnicodeDecodeError:
            owner = "(not text)"
        if owner is not None and not is_run_id(owner):
            raise CorruptJournalError(
                path, 0, "bad hook", what=f"the hook file names {owner!r}, which is no run id"
            )
        if owner is not None and not self.has_family(root_of(owner)):
            # Damaged (or left by a removal that died): deliveries to it would go nowhere.
            raise CorruptJournalError(
                path, 0, "dangling hook", what=f"the hook file names run {owner!r}, which does "
                "not exist"
            )  # fmt: skip
        return owner

    def release(self, token: str, run_id: str) -> None:
        """Release `token` if `run_id` owns it, durably before this returns."""
        if self.owner(token) == run_id:
            path = self._path(token)
            with guard(path.parent, "releasing a hook"):
                path.unlink(missing_ok=True)
                _journal.fsync_dir(path.parent)
