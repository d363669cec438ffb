"""Cross-process wake-ups: wait for named files in one directory to change (watchfiles).

`DirWatcher` starts watching when it is created, so a caller can create it, check the
current state, and then wait without a window in which a change could slip by unseen. It
uses the notify backend of watchfiles (inotify on Linux): no polling. When the system refuses
one more watcher (Linux allows 128 inotify instances per user by default, shared by every
program of that user), `wait` instead returns every `_POLL_S` seconds for the caller to look
again (both callers re-check the state they wait on): slower to wake, but a tail, a chat or a
server stream keeps working rather than failing with "Too many open files". (watchfiles' own
polling compares whole-second times and misses a second change within the same second.)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from watchfiles._rust_notify import RustNotify, WatchfilesRustInternalError

_DEBOUNCE_MS, _STEP_MS = 50, 2
_POLL_S = 0.05  # how often a watcher without notify support says "look again"


class DirWatcher:
    """Watches `folder` (not recursively) for changes to the files called `names`."""

    def __init__(self, folder: Path, names: Iterable[str]) -> None:
        folder = folder.resolve()
        self._targets = {str(folder / name) for name in names}
        self._stop = threading.Event()
        self._notify: RustNotify | None = None
        with contextlib.suppress(WatchfilesRustInternalError, OSError):  # inotify limit
            self._notify = RustNotify([str(folder)], False, False, 300, False, False)

    async def wait(self, timeout: float | None = None) -> bool:
        """True once a watched file changed (when polling: may have changed, look again);
        False when `timeout` seconds passed first."""
        if self._notify is None:
            if timeout is not None and timeout <= 0:
                return False
            await asyncio.sleep(_POLL_S if timeout is None else min(timeout, _POLL_S))
            return timeout is None or timeout > _POLL_S
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                left_ms = 0 if deadline is None else int((deadline - time.monotonic()) * 1000)
                if deadline is not None and left_ms <= 0:
                    return False
                result = await asyncio.to_thread(
                    self._notify.watch, _DEBOUNCE_MS, _STEP_MS, left_ms, self._stop
                )
                if isinstance(result, set):
                    if any(path in self._targets for _, path in result):
                        return True
                    continue
                if result == "timeout" and deadline is not None:
                    return False
                if result == "stop":
                    return False
        except BaseException:
            self._stop.set()  # a cancelled wait must not leave the thread watching
            raise

    def close(self) -> None:
        self._stop.set()
        if self._notify is not None:
            self._notify.close()

    def __enter__(self) -> DirWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
