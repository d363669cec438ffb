"""Cross-process wake-ups: wait for named files in one directory to change (watchfiles).

`DirWatcher` starts watching when it is created, so a caller can create it, check the
current state, and then wait without a window in which a change could slip by unseen. It
uses the notify backend of watchfiles (inotify on Linux): no polling.

Every watcher of one folder in a process shares one notify handle and one thread of its own:
a server following many streams holds one inotify instance per folder (the kernel allows
128 per user, shared by every program of that user), not one per stream, and no waiter
occupies a thread of the event loop's default executor (six threads on two cores), which
other work needs. When the system refuses even that one handle, `wait` instead returns every
`_POLL_S` seconds for the caller to look again (both callers re-check the state they wait
on): slower to wake, but a tail, a chat or a server stream keeps working rather than failing
with "Too many open files". (watchfiles' own polling compares whole-second times and misses a
second change within the same second.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

_DEBOUNCE_MS, _STEP_MS = 50, 2
_POLL_S = 0.05  # how often a watcher without notify support says "look again"
_LOCK = threading.Lock()  # guards the registry and every watcher's state


class _Folder:
    """One notify handle on a folder and the thread that hands its changes to the watchers."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.watchers: set[DirWatcher] = set()
        self.stop = threading.Event()
        self.error: Exception | None = None  # the notify handle failed: its watchers raise it
        # Imported here, not at the top: a command that never waits (`eve inspect`) skips the
        # package's import (~6 ms of its start).
        from watchfiles._rust_notify import RustNotify

        # Starts watching at construction; raises when the system has no watcher left.
        self._notify = RustNotify([path], False, False, 300, False, False)
        threading.Thread(target=self._run, name=f"eve-watch {path}", daemon=True).start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                result = self._notify.watch(_DEBOUNCE_MS, _STEP_MS, 0, self.stop)
                if not isinstance(result, set):
                    continue
                changed = {path for _, path in result}
                # Taken after the batch returned: a watcher registered before a change in the
                # batch is in this set, so no change after registration goes unseen.
                with _LOCK:
                    hit = [w for w in self.watchers if not w._targets.isdisjoint(changed)]
                for watcher in hit:
                    watcher._fire()
        except Exception as exc:
            self.error = exc
            with _LOCK:
                if _FOLDERS.get(self.path) is self:
                    del _FOLDERS[self.path]  # a later watcher gets a fresh handle
                hit = list(self.watchers)
            for watcher in hit:
                watcher._fire()
        finally:
            self._notify.close()


_FOLDERS: dict[str, _Folder] = {}


def touched(path: str) -> None:
    """This process has just changed the file `path` (its folder resolved): its watchers here
    wake now, not when the notify batch (up to its debounce) returns. Watchers re-check what
    they wait on, so the later notify wake-up is harmless."""
    if not _FOLDERS:
        return  # no watcher in this process (the usual writer's case)
    folder = os.path.dirname(path)
    with _LOCK:
        shared = _FOLDERS.get(folder)
        hit = [w for w in shared.watchers if path in w._targets] if shared is not None else []
    for watcher in hit:
        watcher._fire()


class DirWatcher:
    """Watches `folder` (not recursively) for changes to the files called `names`."""

    def __init__(self, folder: Path, names: Iterable[str]) -> None:
        path = str(folder.resolve())
        self._targets = frozenset(str(Path(path) / name) for name in names)
        self._changed = False  # a change since the last wait that returned True
        self._waiter: asyncio.Future[bool] | None = None
        self._polling = False
        from watchfiles._rust_notify import WatchfilesRustInternalError

        with _LOCK:
            shared = _FOLDERS.get(path)
            if shared is None:
                try:
                    shared = _FOLDERS[path] = _Folder(path)
                except (WatchfilesRustInternalError, OSError):  # the inotify instance limit
                    self._polling = True
            if shared is not None:
                shared.watchers.add(self)
        self._folder: _Folder | None = shared

    def _fire(self) -> None:
        """A watched file changed (called on the folder's thread)."""
        with _LOCK:
            self._changed = True
            waiter = self._waiter
        if waiter is not None:
            _settle(waiter, True)

    async def wait(self, timeout: float | None = None) -> bool:
        """True once a watched file changed (when polling: may have changed, look again);
        False when `timeout` seconds passed first."""
        if self._polling:
            if timeout is not None and timeout <= 0:
                return False
            await asyncio.sleep(_POLL_S if timeout is None else min(timeout, _POLL_S))
            return timeout is None or timeout > _POLL_S
        folder = self._folder
        if folder is not None and folder.error is not None:
            raise folder.error
        with _LOCK:
            if self._changed or self._folder is None or (timeout is not None and timeout <= 0):
                changed, self._changed = self._changed, False
                return changed
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass
        finally:
            with _LOCK:
                self._waiter = None
                changed, self._changed = self._changed, False
        if folder is not None and folder.error is not None:
            raise folder.error
        return changed

    def close(self) -> None:
        with _LOCK:
            folder, self._folder = self._folder, None
            waiter, self._waiter = self._waiter, None
            if folder is not None:
                folder.watchers.discard(self)
                if not folder.watchers:
                    folder.stop.set()  # its thread closes the handle within a step
                    if _FOLDERS.get(folder.path) is folder:
                        del _FOLDERS[folder.path]
        if waiter is not None:
            _settle(waiter, False)

    def __enter__(self) -> DirWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(waiter: asyncio.Future[bool], value: bool) -> None:
    """Resolve `waiter` on its own loop, from any thread (a closed loop has no one waiting)."""

    def settle() -> None:
        if not waiter.done():
            waiter.set_result(value)

    with contextlib.suppress(RuntimeError):
        waiter.get_loop().call_soon_threadsafe(settle)
