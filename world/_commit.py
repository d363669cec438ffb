"""When what a store keeps pending becomes durable: the families with something pending, and
the one place that decides when they commit.

A store that lets an append return before its data is durable (a local journal's deferred
`fdatasync`, a PostgreSQL owner's records kept for one transaction) marks the family
`pending`; the queue commits every pending family

* now (`commit`): before an effect someone observes, and before the store writes anything a
  reader could see (a head, a delivery, a hook, a stream item, a family), so nothing that
  follows from a record is seen before the record is durable;
* `wait` seconds after an effect no one observes began (`commit_soon`, on the caller's event
  loop): a quick effect (a model's answer) is followed by one that commits first (a tool's),
  and the records before both share that commit.

A commit made by the loop's timer that fails is raised by the next `commit` (and by
`check`, before the store takes more): what was appended after it may not follow what is
stored. The store says what one family's commit is (`commit_family`: True once nothing of it
is pending, False when it took something new meanwhile and stays pending). A store whose
commit waits on a network (`off_loop`) has the timer's commit made on a thread of the
engine's (`_offload`): the loop goes on driving other families meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from . import _offload
from ._errors import WorldError

# Seconds the records and stream items before an effect no one observes (a model's request)
# wait for the next effect, which commits them with its own in one go.
EFFECT_WAIT = 0.002


class CommitQueue:
    """The pending families of one store object, and when they commit."""

    def __init__(
        self,
        commit_family: Callable[[str], bool],
        wait: float = EFFECT_WAIT,
        *,
        clock: Callable[[], float] = time.monotonic,
        off_loop: bool = False,
    ) -> None:
        self._commit_family = commit_family
        self.wait = wait
        self._clock = clock
        self._off_loop = off_loop
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._failure: WorldError | None = None  # from a commit the loop's timer made
        self._due: float | None = None  # when a commit is due (`commit_soon`)
        self._timer: asyncio.AbstractEventLoop | None = None  # the loop whose timer is set

    def pending(self, root: str) -> None:
        """Family `root` holds something not durable yet."""
        with self._lock:
            self._pending.add(root)

    @property
    def idle(self) -> bool:
        """Nothing pending and no failure to raise."""
        return not self._pending and self._failure is None

    def check(self) -> None:
        """Raise the failure of a commit the loop's timer made, if any (before the store
        takes more: what follows may not come after what is stored)."""
        if self._failure is not None:
            self.commit()

    def commit(self) -> None:
        """Return once every family pending now is durable (or raise why one is not). A family
        leaves the set only once committed: a caller finding it there waits for the one
        committing it (the store's own lock), never returns before its data is durable."""
        if self.idle:
            self._due = None  # (a timer finding none commits nothing early later)
            return  # nothing pending (most calls: several a step)
        self._due = None
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
        with self._lock:
            roots = list(self._pending)
        for root in roots:
            done = self._commit_family(root)
            with self._lock:
                if done:
                    self._pending.discard(root)

    def commit_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """Commit `wait` seconds after the first effect no one observes since the last commit,
        on `loop` (its timer; a failure then is raised by the next `commit` or `check`)."""
        if not self._pending:
            return
        if self._due is None:
            self._due = self._clock() + self.wait
        if self._timer is not loop:
            self._timer = loop
            loop.call_later(self.wait, self._when_due, loop)

    def _when_due(self, loop: asyncio.AbstractEventLoop) -> None:
        due = self._due
        if due is not None and due - self._clock() > 0.0001:
            loop.call_later(due - self._clock(), self._when_due, loop)
            return
        if self._timer is loop:
            self._timer = None
        if due is None:
            return  # committed meanwhile
        if self._off_loop:
            loop.run_in_executor(_offload.pool(), self._commit_due)
        else:
            self._commit_due()

    def _commit_due(self) -> None:
        try:
            self.commit()
        except WorldError as exc:  # raised by the next commit or check, not lost here
            self._failure = exc
