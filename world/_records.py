"""The journal's record bodies, as mypy checks them.

A record is whole in memory (`JournalRecord`: `{t, run, g, at}` and the fields of its kind) and
compact on disk (`StoredRecord`, `Family.pack` / `Family.expand`). One `TypedDict` per form,
with every field of every kind optional but `t`: the kinds share most fields (`name` of
`step`, `attempt`, `began`, `prog`; `token` of `hook`, `recv`), and a reader asks for a field
by name whatever the kind. Kinds (`t`):

* `start` / `gen`: a run's (a generation's) beginning: `workflow`, `input`, `meta`,
  `parent`, `created`, `inbox` (the consumption state), `hooks`, `nc` (children so far).
* `step` (`ok` or `err`, `n` the run of its function), `attempt` (a run that failed and is
  retried: `err`, `n`), `began` (a tracked step's function began: `n`), `prog` (progress it
  recorded: `v`).
* `hook` (`token` claimed), `recv` (deliveries taken: `token`, `ids`, `values`; `poll`,
  `skip`), `sleep` (`until`), `wake`, `child` (`child`, `workflow`), `park` (`waiting`).
* `done` (`result`), `failed` (`error`); `gap` (a repair's stand-in for damaged bytes, `n`).
"""

from __future__ import annotations

from typing import Any, Required, TypedDict


class InboxState(TypedDict):
    """Every delivery below `w` consumed, and those of `x` (ids at or above it)."""

    w: int
    x: list[int]


class Waiting(TypedDict, total=False):
    """What a parked run waits on: a hook (`hook`; stored as its index in the generation's
    `hooks` when it is one of them), a durable timer (`timer`, unix time), a child run."""

    hook: Any  # str whole; str or int stored
    timer: float
    child: str


class RunError(TypedDict, total=False):
    """A failure as journaled (`failed.error`, `step.err`, `attempt.err`)."""

    type: str
    message: str
    traceback: str
    retryable: bool


class _Body(TypedDict, total=False):
    """The fields a record has in both forms."""

    t: Required[str]
    run: str
    g: int
    at: float
    seq: int  # whole records written by the first pre-release eve only
    # start / gen
    workflow: str
    input: Any
    meta: dict[str, Any]
    parent: str | None
    created: float
    nc: int
    # step / attempt / began / prog
    name: str
    ok: Any
    err: RunError
    fatal: bool  # a `step` whose error no retry was allowed to follow
    n: int
    v: Any
    # hook / recv / sleep
    token: str
    ids: list[int]
    values: list[Any]
    poll: bool
    skip: int
    lost: int  # a recv whose delivery the inbox no longer holds (set by the reader)
    until: float
    # child / park / done / failed
    child: str
    waiting: Waiting
    result: Any
    error: RunError


class JournalRecord(_Body, total=False):
    """A journal record, whole (see the module for the fields of each kind)."""

    inbox: InboxState
    hooks: list[str]


class StoredRecord(_Body, total=False):
    """A record as the journal stores it: `r` the run id after the root's (absent: the root
    run), `d` milliseconds since its generation began (`at` for `start`/`gen`), `c` the
    checksums of the deliveries a `recv` took, `inbox` the watermark alone when nothing
    above it is consumed, `hooks` hex tokens as bytes. A fork's copied records and a
    repair's `gap` are stored whole."""

    r: str
    d: int
    c: list[int]
    inbox: InboxState | int
    hooks: list[str | bytes]
