"""The listener thread of a `PostgresWorld`: wake-ups, liveness, lease renewals."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .sql import _reason, _server_of

if TYPE_CHECKING:
    from .world import PostgresWorld


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
