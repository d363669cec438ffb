"""The threads of a `PostgresWorld`: its listener (wake-ups, liveness, lease renewals) and its
flusher (batches written off the event loop)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .batches import _PgLease
from .sql import _reason, _server_of

if TYPE_CHECKING:
    from .batches import Batching
    from .world import PostgresWorld


# Seconds an owner's batch waits, from its first entry, for the next effect or visible write
# to take it, before the flusher writes it (what a live tail may lag behind, and how long a
# record may be kept when nothing follows it).
BATCH_WAIT = 0.01
# Seconds after an effect no one observes began (a model call) before the flusher writes what
# was pending: a quick effect's caller takes the batch first, with what the effect's end
# appended, in one commit instead of two in a row (the next effect waits for both).
EFFECT_WAIT = 0.002


class _Listener(threading.Thread):
    """The world's own connection: LISTEN for wake-ups, hold the liveness lock, renew leases."""

    def __init__(self, world: PostgresWorld) -> None:
        super().__init__(name="eve-pg-listener", daemon=True)
        self.world = world
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.failure = ""
        self._conn: psycopg.Connection[Any] | None = None

    def run(self) -> None:
        pause = 0.05
        while not self.stop.is_set():
            try:
                with psycopg.connect(
                    self.world._target.conninfo, autocommit=True, connect_timeout=5
                ) as conn:
                    self._conn = conn
                    self.world._seen_server(_server_of(conn))
                    conn.execute(f'LISTEN "{self.world._channel}"')
                    conn.execute("SELECT pg_advisory_lock(%s)", [self.world._alive_key])
                    self.failure, pause = "", 0.05
                    self.ready.set()
                    if self.world._away:
                        self.world._back()
                    self.world._forget_inbox_ends()
                    self.world._tails_again(conn)
                    self.world._signals.fire(None)  # whatever was missed while away
                    self._serve(conn)
            except psycopg.Error as exc:
                self.failure = _reason(exc)
                if not self.stop.is_set() and pause > 0.05:  # reconnecting failed too
                    self.world._gone(exc)
            finally:
                self.ready.clear()
                self._conn = None
                self.world._forget_inbox_ends()
            if not self.stop.is_set():
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _serve(self, conn: psycopg.Connection[Any]) -> None:
        world = self.world
        beat = min(world._target.lease / 3, 1.0)
        world._renew(conn)  # at once: after a lost connection, the leases ran on meanwhile
        renewed = time.monotonic()
        while not self.stop.is_set():
            for note in conn.notifies(timeout=beat):
                if self.stop.is_set():
                    return
                for key in note.payload.split(" "):  # a batch names all its streams
                    if key.startswith("i"):
                        world._forget_inbox_ends(key[1:])
                    world._signals.fire(key)
            if time.monotonic() - renewed >= world._target.lease / 3:
                world._renew(conn)
                renewed = time.monotonic()

    def halt(self, wake: Callable[[], None]) -> None:
        """Stop; `wake` sends it a notification so it sees that at once."""
        self.stop.set()
        if self.ready.is_set():
            with contextlib.suppress(Exception):
                wake()
        self.join(timeout=5)


class _Flusher(threading.Thread):
    """Writes owners' batches off the event loop, and without it (asking costs the loop no
    future, timer or wake-up): `EFFECT_WAIT` after an effect no one observes began (`early`),
    else once a batch's first entry is `BATCH_WAIT` old. While a batch is pending it sleeps
    until the first one is due; while leases are held and nothing is pending it looks every
    `BATCH_WAIT / 2` (so a first entry wakes no one); with no lease held it sleeps until a
    first entry wakes it (`soon`)."""

    def __init__(self, world: Batching) -> None:
        super().__init__(name="eve-pg-flusher", daemon=True)
        self.world = world
        self.cond = threading.Condition(threading.Lock())
        # lease: when its batch is to be written, and which batch (`taken`: one written by
        # someone else meanwhile is not the flusher's to write early)
        self.urgent: dict[_PgLease, tuple[float, int]] = {}
        self.until = math.inf  # when the flusher looks next (monotonic)
        self.idle = False
        self.stop = False

    def early(self, lease: _PgLease) -> None:
        due = time.monotonic() + EFFECT_WAIT
        with self.cond:
            asked = self.urgent.get(lease)
            if asked is None or asked[1] != lease.taken:  # (else the same batch, asked before)
                self.urgent[lease] = (due, lease.taken)
            self.idle = False
            if due < self.until:  # (else it looks by then anyway)
                self.cond.notify()

    def soon(self) -> None:
        """A batch got its first entry (its `since` is set before this is called)."""
        if self.idle:
            with self.cond:
                if self.idle:
                    self.idle = False
                    self.cond.notify()

    def run(self) -> None:
        world = self.world
        wait: float | None = BATCH_WAIT / 2
        while True:
            with self.cond:
                if wait is None and not self.idle:  # a first entry came meanwhile
                    wait = BATCH_WAIT / 2
                now = time.monotonic()
                if self.urgent:
                    first = min(due for due, _ in self.urgent.values()) - now
                    wait = first if wait is None else min(wait, first)
                if not self.stop and (wait is None or wait > 0):
                    self.until = math.inf if wait is None else now + wait
                    self.cond.wait(wait)
                    self.until = math.inf
                if self.stop:
                    return
                now = time.monotonic()
                due_now = [lease for lease, (due, _) in self.urgent.items() if due <= now]
                # (one whose batch was written meanwhile is not written early: a later waits)
                urgent = {lease for lease in due_now if self.urgent.pop(lease)[1] == lease.taken}
            with world._lock:
                leases = list(world._leases.values())
            for lease in leases:
                since = lease.since
                if lease in urgent or (since is not None and now - since >= BATCH_WAIT):
                    world._flush_quietly(lease)
            wait = self._next_look()

    def _next_look(self) -> float | None:
        """Seconds until the flusher looks again (None: once woken)."""
        with self.cond:
            self.idle = True  # unless a lease is held: looked at after this is set
        with self.world._lock:
            held = [lease for lease in self.world._leases.values() if not lease.lost]
        if not held:
            return None
        with self.cond:
            self.idle = False
        firsts = [since for lease in held if (since := lease.since) is not None]
        if not firsts:
            return BATCH_WAIT / 2
        return min(firsts) + BATCH_WAIT - time.monotonic()

    def halt(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify()
        self.join(timeout=5)
