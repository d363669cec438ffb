"""`PostgresWorld`: the world in a PostgreSQL database, shared by any number of processes.

One schema (`eve` unless the URL says `?schema=NAME`) holds one world, created and migrated by
`_pg_schema`. Every durable call is one statement in its own transaction (autocommit), so a
call either happened whole or not at all; a call whose connection broke is retried on a fresh
connection, and a retried write first checks whether its first try committed (a create, an
append and a delivery carry what identifies them), so nothing is written twice.

Ordering (`owners`): an owner's records and stream items are kept in its lease and written
by its family's commit, one fenced transaction committed synchronously; when a family commits
is the world core's commit queue's decision (`world._commit`).

Leases: the family row holds an epoch, the owner, and the lease's expiry. `acquire` takes a
free, expired or dead owner's lease and increments the epoch; every write of the owner (append,
head, stream items of its family) names the epoch it holds and is refused once another worker
took the lease (fencing: a worker that lost a lease can never write to that family again; the
world object remembers the families it lost, so nothing it writes without a lease reaches them
either, until it acquires them again).
An owner is alive while its listener connection holds its advisory lock (free the moment its
process dies; for a lease's time after the server started, every owner is taken for alive: a
restart freed every lock); a frozen one loses its leases when they expire (`?lease=SECONDS`,
10 s by default), renewed by the listener thread while it runs and as soon as it reconnects.

Wake-ups: deliveries and stream items `pg_notify` in their own transaction (an owner's batch
only while another world object tails one of the family's streams: `tails`, a row each
tailing object registers; its own tails the writer wakes itself); one listener connection
per world object turns them into wake-ups of the waiting coroutines (after a lost connection
every waiter is woken to look again; an idle tail also looks every `TAIL_LOOK`).

Connections: a `psycopg_pool` pool of at most `?pool=N` (8 by default), plus the listener's
one, however many families are driven or parked.
The URL's password is never printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg

from ... import _codec, _offload
from ..._errors import (
    HookConflictError,
    OwnershipError,
    RunExistsError,
    RunNotFoundError,
    WorldError,
)
from ..._family import head_wake
from ..._records import StoredRecord
from ..._signals import wait_set
from ..._store import IO
from ..._world import (
    FamilyHead,
    FamilyLog,
    FamilyUsage,
    InboxItem,
    Lease,
    check_name,
    check_run_id,
    inbox_item,
    inbox_record,
    root_of,
)
from .owners import _PgLease
from .rows import delivery_check, record_row
from .streams import Streams, _stream_root

if TYPE_CHECKING:
    from ..._findings import Finding

COMPACT_MIN = 16 * 1024  # consumed delivery bytes an inbox keeps before dropping them


class PostgresWorld(Streams):
    """Durable storage in PostgreSQL; many processes may share one world."""

    io = IO.NETWORK  # every call is a round trip: see Store.io
    shared = True  # any number of workers on any machines: see World.shared

    # -- families ----------------------------------------------------------------------------
    def create_family(
        self,
        root: str,
        bodies: list[bytes],
        *,
        streams: Mapping[str, tuple[str, int]] | None = None,
        hooks: Mapping[str, str] | None = None,
    ) -> list[int]:
        if streams is not None or hooks is not None:
            return self._fork(root, bodies, streams or {}, hooks or {})
        check_run_id(root)
        self._writable()
        token = secrets.token_hex(8)
        params = {**_record_columns(root, bodies), "root": root, "next": len(bodies) + 1,
                  "token": token}  # fmt: skip
        self._commits.commit()

        def go(conn: psycopg.Connection[Any], attempt: int) -> bool:
            row = conn.execute(self._sql["create"], params).fetchone()
            if row and row[0]:
                return True
            if attempt:  # the first try may have committed: then the family is ours
                mine = conn.execute(self._sql["created_by"], params).fetchone()
                return bool(mine and mine[0] == token)
            return False

        fault = self._write_fault()
        if not self._call(go):
            raise RunExistsError(f"run {root!r} already exists")
        self._after_write(fault)
        return list(range(1, len(bodies) + 1))

    def _fork(
        self,
        root: str,
        bodies: list[bytes],
        streams: Mapping[str, tuple[str, int]],
        hooks: Mapping[str, str],
    ) -> list[int]:
        # One statement: the family, its records, the stream copies (rows copied inside the
        # database, from one snapshot of the source) and the hooks commit together or not.
        check_run_id(root)
        for name in streams:
            check_name(name, "stream name")
        self._writable()
        for source, _ in streams.values():  # this object's items of them are copied too
            self._settled(source)
        self._commits.commit()
        token = secrets.token_hex(8)
        names = list(streams)
        params = {
            **_record_columns(root, bodies), "root": root, "next": len(bodies) + 1,
            "token": token,
            "names": names, "sources": [streams[n][0] for n in names],
            "counts": [streams[n][1] for n in names], "roots": [_stream_root(n) for n in names],
            "tokens": list(hooks), "runs": [hooks[t] for t in hooks],
        }  # fmt: skip

        def go(conn: psycopg.Connection[Any], attempt: int) -> bool:
            if attempt:  # the first try may have committed: then the family is ours
                mine = conn.execute(self._sql["created_by"], params).fetchone()
                if mine is not None:
                    return bool(mine[0] == token)
            try:
                row = conn.execute(self._sql["fork"], params).fetchone()
            except psycopg.errors.UniqueViolation:
                taken = [t for t in hooks if self._owner_on(conn, t) not in (None, hooks[t])]
                if taken:
                    message = f"hook token {taken[0]!r} is owned by another run"
                    raise HookConflictError(message) from None
                raise WorldError(f"{self.where}: a stream of the fork {root} exists already "
                                 "(a remnant: remove it first)") from None  # fmt: skip
            return bool(row and row[0])

        fault = self._write_fault()
        if not self._call(go):
            raise RunExistsError(f"run {root!r} already exists")
        self._after_write(fault)
        return list(range(1, len(bodies) + 1))

    def _owner_on(self, conn: psycopg.Connection[Any], token: str) -> str | None:
        row = conn.execute(self._sql["hook_owner"], {"token": token}).fetchone()
        return None if row is None else str(row[0])

    def families(self) -> list[str]:
        return [row[0] for row in self._all("families", {})]

    def family_exists(self, root: str) -> bool:
        return self._one("family", {"root": root}) is not None

    def heads(
        self, *, roots: Sequence[str] | None = None, inbox: bool = True, runnable: bool = False
    ) -> list[FamilyHead]:
        # The marks cost nothing here; `runnable` reads only the families with work.
        if roots is not None:
            rows = self._all("heads_of", {"roots": list(roots)})
        elif runnable:
            rows = self._all("runnable_heads", {"now": self.now()})
        else:
            rows = self._all("heads", {})
        return [FamilyHead(str(root), self._head(head), int(end)) for root, head, end in rows]

    def family_usage(self, root: str, *, streams: Sequence[str] | None = None) -> FamilyUsage:
        check_run_id(root)
        names = None if streams is None else list(streams)
        if root in self._leases:
            self._commits.commit()
        row = self._one("usage", {"root": root, "names": names})
        if row is None:
            return FamilyUsage(0, 0.0)
        # The last write known here: the head's (written at the end of every drive), the
        # family's creation or its latest delivery (the records and streams a drive writes
        # are written under a lease, which gc takes before it looks).
        return FamilyUsage(int(row[0] or 0), float(row[1] or 0.0))

    def stream_names(self, *, family: str | None = None) -> list[str]:
        if family is not None:
            return [str(row[0]) for row in self._all("family_streams", {"root": family})]
        return [str(row[0]) for row in self._all("stream_names", {})]

    @property
    def schema_name(self) -> str:
        return f"schema {self._target.schema} of {self.where.split(' (')[0]}"

    @property
    def schema_sql(self) -> str:
        return f'"{self._target.schema}"'

    @property
    def exists(self) -> bool:
        return self._exists

    def verify(self, *, repair: bool = False) -> list[Finding]:
        from . import verify

        if repair:
            self._writable()
        self._commits.commit()
        return (verify.repair if repair else verify.verify)(self)

    def remnants(self) -> list[str]:
        return [str(row[0]) for row in self._all("remnants", {})]

    def remove_family(self, root: str, *, inbox_mark: int | None = None) -> bool:
        check_run_id(root)
        self._writable()
        lease = self._leases.get(root)
        params = {"root": root, "mark": inbox_mark,
                  "epoch": None if lease is None else lease.epoch}  # fmt: skip

        def go(conn: psycopg.Connection[Any], _: int) -> bool:
            # One transaction: the family row locked first, so a delivery (which updates it)
            # waits and then finds no family; a lost lease or a new delivery removes nothing.
            with conn.transaction():
                row = conn.execute(self._sql["remove_lock"], params).fetchone()
                if row is not None:
                    epoch, inbox_next = row
                    if lease is not None and epoch != lease.epoch:
                        self._lose(lease)
                        raise OwnershipError(self._lost_message(root))
                    if inbox_mark is not None and int(inbox_next) != inbox_mark:
                        return False
                conn.execute(self._sql["remove"], params)
            return True

        removed = self._call(go)
        if removed and lease is not None:
            lease.lost = True  # nothing is written for it any more; its release is a no-op
            with self._lock:
                lease.pending, lease.records, lease.head = [], [], None
        return removed

    def load(self, root: str, start: int = 0) -> FamilyLog:
        lease = self._leases.get(root)
        if lease is not None:
            self._commits.commit()  # what this owner appended is read back
            self._failed(lease)
        rows = self._all("load", {"root": root, "start": max(start, 1)}) if start > 0 else []
        if not rows or rows[0][0] != start:
            start = 0
            rows = self._all("load", {"root": root, "start": 1})
            if not rows and not self.family_exists(root):
                raise RunNotFoundError(f"no run family {root!r} in {self.where}")
        what = f"{self.where}: journal of run family {root}"
        records = [(int(pos), self._decoded(pos, body, what)) for pos, _, _, body in rows]
        if lease is not None and not lease.lost:  # the generations its next records go on
            with self._lock:
                lease.gens.update({run: gen for _, run, gen, _ in rows if gen is not None})
        return FamilyLog(records=cast("list[tuple[int, StoredRecord]]", records), start=start)

    def read_head(self, root: str) -> dict[str, Any] | None:
        row = self._one("read_head", {"root": root})
        return None if row is None else self._head(row[0])

    @staticmethod
    def _head(stored: Any) -> dict[str, Any] | None:
        if stored is None:
            return None
        try:
            head = _codec.decode(bytes(stored))
        except Exception:
            return None  # unreadable: rebuilt from the journal
        return head if isinstance(head, dict) else None

    def write_head(self, root: str, head: dict[str, Any]) -> None:
        data = _codec.encode(head, "head")
        due, mark = head_wake(head)
        lease = self._leases.get(root)
        if lease is not None:  # written by the family's commit, after its records and items
            self._held(root)
            with self._lock:
                lease.head = (data, due, mark)
            self._commits.pending(root)
            self._commits.commit()
            self._held(root)  # (raises why it was not written)
            return

        def unowned(conn: psycopg.Connection[Any], _: int) -> None:
            free = {"root": root, "head": data, "due": due, "mark": mark}
            if conn.execute(self._sql["write_head_free"], free).rowcount:
                return
            if conn.execute(self._sql["family"], {"root": root}).fetchone() is None:
                raise RunNotFoundError(f"no run family {root!r} in {self.where}")
            raise OwnershipError(f"run family {root!r} is owned by another worker")

        self._writable()
        self._check_not_lost(root)
        self._commits.commit()
        self._call(unowned)

    # -- inbox -------------------------------------------------------------------------------
    def deliver(self, root: str, token: str, payload: Any) -> int:
        self._writable()
        at = self.now()
        body = _codec.encode(inbox_record(token, payload, at), "payload")
        params = {"root": root, "body": body, "token": token, "at": at, "key": uuid.uuid4(),
                  "chan": self._channel, "note": "i" + root}  # fmt: skip

        def go(conn: psycopg.Connection[Any], attempt: int) -> int | None:
            if attempt:
                row = conn.execute(self._sql["delivered"], params).fetchone()
                if row is not None:
                    return int(row[0])
            row = conn.execute(self._sql["deliver"], params).fetchone()
            return None if row is None else int(row[0])

        fault = self._write_fault()
        self._commits.commit()  # (a reader may see the delivery: what this object appended first)
        try:
            item_id = self._call(go)
        finally:
            self._forget_inbox_ends(root)
        if item_id is None:
            raise RunNotFoundError(f"no run family {root!r} in {self.where}")
        self._after_write(fault)
        return item_id

    def read_inbox(self, root: str, start: int = 0) -> tuple[list[InboxItem], int]:
        start = max(start, 0)
        rows = self._all("read_inbox", {"root": root, "start": start})
        if not rows:
            raise RunNotFoundError(f"no run family {root!r} in {self.where}")
        end = int(rows[0][0])
        what = f"{self.where}: inbox of run family {root}"
        items = [
            item
            for _, item_id, body in rows
            if item_id is not None
            and (item := inbox_item(int(item_id), self._decoded(item_id, body, what),
                                    delivery_check(bytes(body)))) is not None
        ]  # fmt: skip
        return items, max(end, start)

    def compact_inbox(self, root: str, keep_from: int) -> bool:
        if not self._exists:
            return False
        return bool(
            self._call(
                lambda conn, _: (
                    conn.execute(
                        self._sql["compact_inbox"],
                        {"root": root, "keep": keep_from, "least": COMPACT_MIN},
                    ).rowcount
                )
            )
        )

    def inbox_end(self, root: str) -> int:
        known = self._inbox_ends.get(root)
        if known is not None:
            return known
        listener = self._listener
        epoch = self._inbox_epoch
        row = self._one("inbox_end", {"root": root})
        end = 0 if row is None else int(row[0])
        with self._lock:
            if (
                root in self._leases
                and listener is not None
                and listener.ready.is_set()
                and epoch == self._inbox_epoch
            ):
                self._inbox_ends[root] = end
        return end

    def known_inbox_end(self, root: str) -> int | None:
        return self._inbox_ends.get(root)

    def _forget_inbox_ends(self, root: str | None = None) -> None:
        """A delivery to `root` (None: to any family, perhaps unheard) came."""
        with self._lock:
            self._inbox_epoch += 1
            if root is None:
                self._inbox_ends.clear()
            else:
                self._inbox_ends.pop(root, None)

    def inbox_name(self, root: str) -> str:
        return f"inbox of run family {root} in {self.where}"

    # -- hooks -------------------------------------------------------------------------------
    def claim_hook(self, token: str, run_id: str) -> str:
        check_name(token, "hook token")
        self._writable()
        known = self._known_hook(token)
        if known is not None:
            return known
        params = {"token": token, "run": run_id, "root": root_of(run_id)}
        self._commits.commit()

        def go(conn: psycopg.Connection[Any], _: int) -> str:
            row = conn.execute(self._sql["claim_hook"], params).fetchone()
            if row is None:  # taken by a claim that committed after this statement began
                row = conn.execute(self._sql["hook_owner"], params).fetchone()
            return str(row[0]) if row is not None else run_id

        return self._keep_hook(token, self._call(go))

    def hook_owner(self, token: str) -> str | None:
        check_name(token, "hook token")
        known = self._known_hook(token)
        if known is not None:
            return known
        row = self._one("hook_owner", {"token": token})
        return None if row is None else self._keep_hook(token, str(row[0]))

    def _known_hook(self, token: str) -> str | None:
        with self._lock:
            for lease in self._leases.values():
                if token in lease.hooks and not lease.lost:
                    return lease.hooks[token]
        return None

    def _keep_hook(self, token: str, owner: str) -> str:
        with self._lock:
            lease = self._leases.get(root_of(owner))
            if lease is not None and not lease.lost:
                lease.hooks[token] = owner
        return owner

    def release_hook(self, token: str, run_id: str) -> None:
        with self._lock:
            lease = self._leases.get(root_of(run_id))
            if lease is not None:
                lease.hooks.pop(token, None)
        if self._exists:
            self._commits.commit()
            self._call(
                lambda conn, _: conn.execute(
                    self._sql["release_hook"], {"token": token, "run": run_id}
                )
            )

    # -- ownership and wake-ups --------------------------------------------------------------
    def acquire(self, root: str, wait: float | None = None) -> Lease:
        if _offload.inline():  # (it may wait for the listener, and it is a write of a token)
            raise _offload.WouldWait
        check_run_id(root)
        self._writable()
        self._listening()  # alive before owning: else another worker may take it as dead
        holder = secrets.token_hex(8)
        params = {"root": root, "me": self._me, "key": self._alive_key, "holder": holder,
                  "ttl": self._target.lease}  # fmt: skip
        deadline, pause = time.monotonic() + (wait or 0.0), 0.005
        while True:
            row = self._call(lambda conn, _: conn.execute(self._sql["acquire"], params).fetchone())
            if row is not None:
                lease = _PgLease(self, root, int(row[0]), holder, int(row[1]))
                # Read after the takeover committed (a statement of its own sees the last
                # writes of the previous owner, which the takeover waited for).
                rows = self._all("family_lengths", {"root": root})
                lease.lengths = {str(name): int(length) for name, length in rows}
                with self._lock:
                    self._leases[root] = lease
                    self._lost.discard(root)
                return lease
            if not self.family_exists(root):
                raise RunNotFoundError(f"no run family {root!r} in {self.where}")
            if time.monotonic() >= deadline:
                raise OwnershipError(
                    f"run family {root} is owned by another worker or process; wait until it "
                    "parks or finishes"
                )
            time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
            pause = min(pause * 2, 0.1)

    def _release(self, lease: _PgLease) -> None:
        if _offload.inline():  # (its lease is forgotten below: a release is never made again)
            raise _offload.WouldWait
        try:
            if not lease.lost and lease.failure is None:
                # What it holds, while the lease fences it (this family's commit alone: what
                # another family's raises is not this release's).
                self._commit_family(lease.root)
                self._failed(lease)
        finally:
            with self._lock:
                if self._leases.get(lease.root) is lease:
                    del self._leases[lease.root]
            self._forget_inbox_ends(lease.root)
        if not lease.lost:
            params = {"root": lease.root, "epoch": lease.epoch}
            self._call(lambda conn, _: conn.execute(self._sql["release"], params))

    def _renew(self, conn: psycopg.Connection[Any]) -> None:
        """Extend every lease this world holds (on the listener's connection); mark lost
        the ones another worker took."""
        with self._lock:
            leases = [lease for lease in self._leases.values() if not lease.lost]
        if not leases:
            return
        params = {
            "roots": [lease.root for lease in leases],
            "epochs": [lease.epoch for lease in leases],
            "ttl": self._target.lease,
        }
        kept = {row[0] for row in conn.execute(self._sql["renew"], params).fetchall()}
        for lease in leases:
            if lease.root not in kept:
                self._lose(lease)

    async def wait_inbox(self, root: str, mark: int, timeout: float) -> bool:
        await asyncio.to_thread(self._listening)
        key, deadline = "i" + root, time.monotonic() + timeout
        while True:
            event = self._signals.event(key)
            try:
                if await asyncio.to_thread(self.inbox_end, root) != mark:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                await wait_set(event, left)
            finally:
                self._signals.drop(key, event)

    # -- streams -----------------------------------------------------------------------------
    def close(self) -> None:
        with contextlib.suppress(WorldError):
            self._commits.commit()
        with self._tails_lock:
            if self._tails and self._pool is not None:  # its tails end with it
                self._tails.clear()
                params = {"key": self._alive_key}
                with contextlib.suppress(WorldError):
                    self._call(lambda conn, _: conn.execute(self._sql["tails_off"], params))
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.halt(self._wake_listener)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _wake_listener(self) -> None:
        params = {"chan": self._channel}
        self._call(lambda conn, _: conn.execute("SELECT pg_notify(%(chan)s, '')", params))


def _record_columns(root: str, bodies: list[bytes]) -> dict[str, list[Any]]:
    """A new family's records as the `create` and `fork` statements take them."""
    gens: dict[str, int] = {}
    rows = [record_row(root, body, gens) for body in bodies]
    return {"bodies": bodies, "runs": [r[0] for r in rows], "gens": [r[1] for r in rows],
            "kinds": [r[2] for r in rows]}  # fmt: skip
