"""Every error `world` raises, in one place.

```
WorldError                      anything the world refuses or cannot do
├── SerializationError          a value has no msgpack form (names the path to it)
├── CorruptJournalError         a bad record with valid data after it (names file, offset)
├── StorageError                the disk refused a write (ENOSPC, EIO, permissions)
├── StoreFormatError            a store or file in a format this version does not read
├── InvalidNameError            a run id, token or stream name outside the allowed alphabet
├── RunNotFoundError            no run with that id
├── RunExistsError              a run with that id already exists
├── WorkflowNotFoundError       the engine has no workflow registered under that name
├── OwnershipError              another process owns the run family
├── HookConflictError           the hook token is owned by another run
├── NoActiveRunError            no run waits on that token (the resume-or-start signal)
├── DivergenceError             replayed workflow code asked for a different operation
├── ForkError                   a family cannot be forked at that point (`Engine.fork`)
├── StepFailedError             a step failed for good (raised inside the workflow)
└── ChildFailedError            an awaited child run failed (raised inside the workflow)
FatalError                      raised by step code: stop retrying at once
```
"""

from __future__ import annotations

import errno


class WorldError(Exception):
    """Base class of every error raised by `world`."""


class SerializationError(WorldError, TypeError):
    """A value cannot be encoded; `path` locates it, e.g. ``result['items'][2]``."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class CorruptJournalError(WorldError):
    """Stored data is damaged: a bad record that no write cut short explains (valid data
    after it, or a whole record whose checksum fails), or data a repair could not keep.

    `repairable`: a repair of the store helps (the default); an error given `advice` is one
    a repair already left (a record it replaced was needed), and says what to do instead.
    World's messages name no command: the program on top adds how to repair.
    """

    def __init__(
        self,
        file: str,
        offset: int,
        reason: str = "bad record",
        what: str = "",
        advice: str = "",
    ) -> None:
        # `what` replaces the default description (a journal record naming a delivery the
        # inbox no longer holds is damage too, but not a bad record of that file).
        what = what or f"corrupt record at offset {offset} ({reason}) followed by valid data"
        super().__init__(f"{file}: {what}" + (f"; {advice}" if advice else ""))
        self.file = file
        self.offset = offset
        self.reason = reason
        self.what = what
        self.advice = advice
        self.repairable = not advice


class StorageError(WorldError):
    """The storage refused an operation; nothing partial was left behind."""


class StoreUnavailableError(StorageError):
    """The store could not be reached (a database server down, restarting or cut off) within
    the world's wait; a write in flight may or may not have been stored: retry it."""


class StoreFormatError(WorldError):
    """A store, or a file of one, in a format this version does not read: a newer one, or a
    pre-release one from before the format was frozen. Nothing was read or changed."""


_FULL = (errno.ENOSPC, errno.EDQUOT)
_TOO_MANY_FILES = (errno.EMFILE, errno.ENFILE)  # the process's (or system's) limit, not the disk


def os_reason(exc: OSError) -> str:
    """Why the system refused, for a message: its words, or for the process's open-file
    limit (which is not the disk's fault) what to do about it."""
    if exc.errno in _TOO_MANY_FILES:
        return "too many open files: raise the open-file limit (`ulimit -n`)"
    return exc.strerror or str(exc)


def storage_error(path: object, doing: str, exc: OSError) -> StorageError:
    """The one-line :class:`StorageError` for the disk refusing `doing` on `path` (what,
    where, and that what was stored before is intact: the failed write is not kept)."""
    if exc.errno in _FULL:
        return StorageError(
            f"{path}: no space left on the device while {doing}; nothing stored before was "
            "lost (this write was not kept) — free some space, then retry"
        )
    if exc.errno in _TOO_MANY_FILES:
        return StorageError(
            f"{path}: {doing} failed ({os_reason(exc)}, then retry); nothing stored before was lost"
        )
    return StorageError(
        f"{path}: {doing} failed ({exc.strerror or exc}); nothing stored before was lost — "
        "fix the disk or its permissions, then retry"
    )


# What the stored data or the disk refuses (damage, a full disk): never a workflow's failure.
# Code that turns exceptions into failed work re-raises these (the drive stops; it resumes
# once the store is repaired or has space).
STORAGE_ERRORS: tuple[type[WorldError], ...] = (StorageError, CorruptJournalError)


class InvalidNameError(WorldError, ValueError):
    """A run id, hook token or stream name is not in the allowed alphabet."""


class RunNotFoundError(WorldError, LookupError):
    """No run has that id."""


class RunExistsError(WorldError):
    """A run with that id already exists."""


class WorkflowNotFoundError(WorldError, LookupError):
    """No workflow is registered under that name."""


class OwnershipError(WorldError):
    """Another process owns the run family; only one owner may drive it at a time."""


class HookConflictError(WorldError):
    """The hook token is already owned by another active run."""


class NoActiveRunError(WorldError, LookupError):
    """No active run waits on that hook token: start a new run instead."""

    def __init__(self, token: str) -> None:
        super().__init__(f"no active run owns hook token {token!r}")
        self.token = token


class DivergenceError(WorldError):
    """Replayed workflow code asked for another operation than the journal recorded."""

    def __init__(self, run_id: str, position: int, expected: str, actual: str) -> None:
        super().__init__(
            f"run {run_id}: workflow diverged from its journal at position {position}: "
            f"journal has {expected}, code asked for {actual}"
        )
        self.run_id = run_id
        self.position = position
        self.expected = expected
        self.actual = actual


class ForkError(WorldError):
    """A family cannot be forked at that point (says why and what to do)."""


class StepFailedError(WorldError):
    """A step failed after its last attempt; replay raises the same error again."""

    def __init__(self, step: str, error_type: str, message: str, attempts: int) -> None:
        super().__init__(
            f"step {step!r} failed after {attempts} attempt(s): {error_type}: {message}"
        )
        self.step = step
        self.error_type = error_type
        self.message = message
        self.attempts = attempts


class ChildFailedError(WorldError):
    """An awaited child run failed; replay raises the same error again."""

    def __init__(self, run_id: str, error_type: str, message: str) -> None:
        super().__init__(f"child run {run_id} failed: {error_type}: {message}")
        self.run_id = run_id
        self.error_type = error_type
        self.message = message


class FatalError(Exception):
    """Raise (or subclass) in step code to fail the step at once, without retries."""
