"""The commit queue (`world/_commit.py`) over interleavings: appends that leave a family
pending, commits before what a reader could see, commits an unobserved effect leaves to the
loop's timer, commits that fail, and families that take more while they commit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from world import OwnershipError, StorageError
from world._commit import CommitQueue

WAIT = 0.002
ROOTS = ("a", "b", "c")


class _Loop:
    """An event loop's timers on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[..., None], tuple[Any, ...]]] = []

    def call_later(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self.timers.append((self.now + delay, fn, args))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        while due := [t for t in self.timers if t[0] <= self.now]:
            self.timers.remove(due[0])
            due[0][1](*due[0][2])


class _Store:
    """What a store keeps pending, and what is durable."""

    def __init__(self) -> None:
        self.pending: set[str] = set()
        self.durable: set[str] = set()
        self.failing: set[str] = set()  # its next commit fails
        self.busy: set[str] = set()  # it takes more while its next commit runs

    def commit_family(self, root: str) -> bool:
        if root in self.failing:
            self.failing.discard(root)
            raise StorageError(f"{root}: disk full")
        if root in self.pending:
            self.pending.discard(root)
            self.durable.add(root)
        if root in self.busy:
            self.busy.discard(root)
            self.pending.add(root)
            return False
        return True


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(ROOTS)),
        st.tuples(st.just("fail"), st.sampled_from(ROOTS)),
        st.tuples(st.just("busy"), st.sampled_from(ROOTS)),
        st.tuples(st.just("commit"), st.none()),
        st.tuples(st.just("soon"), st.none()),
        st.tuples(st.just("advance"), st.sampled_from([0.0005, WAIT, 0.01])),
    ),
    max_size=40,
)


class _Run:
    """One interleaving, checked as it goes."""

    def __init__(self) -> None:
        self.loop, self.store = _Loop(), _Store()
        self.queue = CommitQueue(self.store.commit_family, WAIT, clock=lambda: self.loop.now)
        self.soon_at: float | None = None  # when an unobserved effect left the commit
        self.promised: set[str] = set()  # what was pending then

    def append(self, root: str) -> None:
        self.promised.discard(root)  # (new data: the promise was for the old)
        self.store.pending.add(root)
        self.store.durable.discard(root)
        self.queue.pending(root)

    def fail(self, root: str) -> None:
        self.store.failing.add(root)

    def busy(self, root: str) -> None:
        self.store.busy.add(root)

    def commit(self, _: None) -> None:
        before = set(self.store.pending)
        self.soon_at, self.promised = None, set()  # this commit keeps the promise (or fails)
        try:
            self.queue.commit()
        except StorageError:
            return  # a failure is raised once: the next commit goes on
        # Everything pending before the call is durable; a family that took more while it
        # committed stays pending, and in the queue.
        assert before <= self.store.durable
        assert self.store.pending <= self.queue._pending

    def soon(self, _: None) -> None:
        if self.store.pending and self.soon_at is None:
            self.soon_at, self.promised = self.loop.now, set(self.store.pending)
        self.queue.commit_soon(self.loop)  # type: ignore[arg-type]

    def advance(self, seconds: float) -> None:
        kept = self.promised - self.store.busy - self.store.failing
        self.loop.advance(seconds)
        if self.soon_at is not None and self.loop.now - self.soon_at >= WAIT:
            if self.queue._failure is None:  # (a failure is raised by the next commit)
                assert kept <= self.store.durable  # committed within the bound
            self.soon_at, self.promised = None, set()


@settings(max_examples=500, deadline=None)
@given(_ops)
def test_what_is_pending_is_durable_when_the_queue_says(ops: list[tuple[str, Any]]) -> None:
    run = _Run()
    for op, arg in ops:
        getattr(run, op)(arg)
        assert run.queue.idle == (not run.queue._pending and run.queue._failure is None)
    # A failure the timer met is raised by the next check, once; then the rest commits.
    if run.queue._failure is not None:
        with pytest.raises(StorageError):
            run.queue.check()
    run.store.failing.clear()
    run.store.busy.clear()
    run.queue.commit()
    assert not run.store.pending and run.queue.idle


def test_a_failure_of_the_timers_commit_is_raised_by_the_next_append() -> None:
    loop, store = _Loop(), _Store()
    queue = CommitQueue(store.commit_family, WAIT, clock=lambda: loop.now)
    store.pending.add("a")
    queue.pending("a")
    store.failing.add("a")
    queue.commit_soon(loop)  # type: ignore[arg-type]
    loop.advance(WAIT)
    assert not queue.idle and "a" not in store.durable
    with pytest.raises(StorageError, match="disk full"):
        queue.check()
    queue.check()  # raised once
    queue.commit()
    assert store.durable == {"a"} and queue.idle


def test_an_unobserved_effect_commits_within_the_wait_and_a_visible_write_at_once() -> None:
    loop, store = _Loop(), _Store()
    queue = CommitQueue(store.commit_family, WAIT, clock=lambda: loop.now)
    store.pending.add("a")
    queue.pending("a")
    queue.commit_soon(loop)  # type: ignore[arg-type]
    loop.advance(WAIT / 2)
    assert store.durable == set()  # not yet: the next effect may take it with its own
    loop.advance(WAIT / 2)
    assert store.durable == {"a"}
    store.pending.add("b")
    queue.pending("b")
    queue.commit()
    assert store.durable == {"a", "b"} and queue.idle


def test_a_network_store_s_timer_commits_on_a_thread_and_the_loop_goes_on() -> None:
    """`off_loop`: the timer's commit (a round trip) is made on a thread; the loop's coroutines
    run while it waits, and a failure is raised by the next commit."""
    threads: list[str] = []
    release = threading.Event()

    def commit_family(root: str) -> bool:
        threads.append(threading.current_thread().name)
        release.wait(5)  # a round trip that lasts until the loop has gone on
        if root == "bad":
            raise OwnershipError("bad: taken over")
        return True

    queue = CommitQueue(commit_family, WAIT, off_loop=True)

    async def main() -> None:
        queue.pending("a")
        queue.commit_soon(asyncio.get_running_loop())
        while not threads:
            await asyncio.sleep(0.001)
        release.set()  # (the loop turned while the commit waited)
        while not queue.idle:
            await asyncio.sleep(0.001)
        queue.pending("bad")
        queue.commit_soon(asyncio.get_running_loop())
        while len(threads) < 2:
            await asyncio.sleep(0.001)

    asyncio.run(main())
    assert len(threads) == 2 and threading.main_thread().name not in threads
    with pytest.raises(OwnershipError, match="taken over"):
        queue.check()
