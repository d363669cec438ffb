"""The storage interface every world implements, and the small data shapes that cross it.

A world stores run *families* (a root run and its child runs, keyed by the root run id): an
append-only journal of records, an inbox of deliveries, a head (status cache), a lease (one
owner at a time), plus hook tokens and named streams. Positions are opaque integers (a byte
offset for files, a sequence number elsewhere). No file path crosses this interface.

Storage calls are synchronous; only waiting for changes is async. Through this interface
every write is durable when it returns (records before anything that follows them); a built-in
store may defer what it can and lets the engine say when it must be durable through the
engine's private side of the store (`_store.Store`: appends' order, before an effect, where
calls are made), which a store of this interface alone needs none of. Records cross as
`encode`d bodies; framing and checksums are the world's.
"""

from __future__ import annotations

import contextvars
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._clock import local_now
from ._errors import InvalidNameError
from ._records import StoredRecord

if TYPE_CHECKING:
    from ._findings import Finding

_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[0-9]{1,9})*")
_NAME = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,199}")
# The family an engine is driving in this context (its workflows' own reads): a store may give
# them the items they appended that wait for the family's next commit, which no other reader
# may see before they are durable (`StreamStore.read_spans`).
DRIVING: contextvars.ContextVar[str | None] = contextvars.ContextVar("world_driving", default=None)


def check_run_id(run_id: str) -> str:
    """Validate a run id: root `[A-Za-z0-9_-]{1,64}`, children `<parent>.<n>`."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise InvalidNameError(
            f"invalid run id {run_id!r}: use 1-64 of A-Z a-z 0-9 _ - (children add .<n>)"
        )
    return run_id


def is_run_id(text: str) -> bool:
    """Whether `text` is a valid run id (see `check_run_id`)."""
    return bool(_RUN_ID.fullmatch(text))


def check_name(name: str, what: str = "name") -> str:
    """Validate a stream name or hook token: `[A-Za-z0-9._:-]{1,200}`, no leading '.'."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidNameError(
            f"invalid {what} {name!r}: use 1-200 of A-Z a-z 0-9 . _ : - (not starting with '.')"
        )
    return name


def root_of(run_id: str) -> str:
    """The family (root run id) a run belongs to: its id before the first '.'."""
    return run_id.split(".", 1)[0]


def stream_family(name: str) -> str | None:
    """The family a stream belongs to: a stream named ``<kind>.<run id>`` (``events.s_1``,
    ``history.s_1.2``) is its run's family's; a name with no such part belongs to none.
    `World.stream_names(family=)` and `World.remove_family` go by this rule."""
    parts = name.split(".", 2)
    if len(parts) < 2 or not _RUN_ID.fullmatch(parts[1]):
        return None
    return parts[1]


@dataclass(frozen=True)
class LostItem:
    """What a stream read returns in place of an item a repair replaced (its bytes were
    damaged; they are kept in quarantine/): the rest of the stream reads as before, each item
    at its index. `offset`: where the item was in the stream's file."""

    offset: int


Head = dict[str, Any]  # a family's head: its status cache (`World.heads`, `World.commit`)


@dataclass(frozen=True)
class FamilyHead:
    """A family's head (None: missing or unreadable) and its inbox mark (`World.inbox_end`)."""

    root: str
    head: Head | None
    inbox_end: int  # -1: not asked for (`World.heads(inbox=False)`)

    @property
    def inbox_read(self) -> int:
        """The inbox mark the family's last drive had read up to (-1: none known): while
        it differs from `inbox_end`, something was delivered that no drive has taken."""
        mark = (self.head or {}).get("inbox_mark")
        return mark if isinstance(mark, int) else -1


@dataclass(frozen=True)
class FamilyUsage:
    """What a family stores: `bytes` (journal, inbox, head, its streams and hooks) and
    `last_write`, the unix time of its latest stored change (0.0: nothing stored)."""

    bytes: int
    last_write: float


@dataclass
class FamilyLog:
    """Records of one family read from some position on, in journal order."""

    records: list[tuple[int, StoredRecord]] = field(default_factory=list)
    start: int = 0  # the position reading began at (0 = the whole journal)


@dataclass
class InboxItem:
    """One delivery: `id` is its position in the family inbox (unique, increasing)."""

    id: int
    token: str
    payload: Any
    at: float
    check: int = 0  # the stored record's checksum: journal `recv` records name it with the id


_HEX = re.compile(r"(?:[0-9a-f]{2})+")


def pack_token(token: str) -> str | bytes:
    """A hook token as stored: a lowercase hex token as its bytes (half the size)."""
    return bytes.fromhex(token) if _HEX.fullmatch(token) else token


def unpack_token(stored: Any) -> str:
    """The token :func:`pack_token` stored."""
    return stored.hex() if isinstance(stored, bytes) else str(stored)


def inbox_record(token: str, payload: Any, at: float) -> dict[str, Any]:
    """The stored form of a delivery: `k` the token (:func:`pack_token`), `p` the payload,
    `a` the time."""
    return {"k": pack_token(token), "p": payload, "a": at}


def inbox_item(pos: int, rec: Any, check: int) -> InboxItem | None:
    """The delivery a stored inbox record holds (None: not a delivery, e.g. the header)."""
    if not isinstance(rec, dict):
        return None
    if "k" in rec:
        return InboxItem(pos, unpack_token(rec["k"]), rec.get("p"), rec.get("a", 0.0), check)
    return None


class Lease(ABC):
    """Ownership of one family; released explicitly or when the owning process dies."""

    @abstractmethod
    def release(self) -> None: ...

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class World(ABC):
    """Durable storage for run families, hooks and streams."""

    # True when processes on other machines may drive the same families: a family whose owner
    # died there is freed by the world (its lease lapses) but no process of this machine learns
    # of it, so a server of a shared world looks for runnable families now and then (the local
    # world's owners are all on one machine: its servers resume what was interrupted at start).
    shared = False

    # Where a world says what its operator should know while it goes on by itself (a database
    # away and back, one line each); None: it says nothing. A server sets it to its log.
    notice: Callable[[str], None] | None = None

    def now(self) -> float:
        """The world's clock, in seconds since the epoch: what every durable time is read from
        (a record's time, a sleep's wake time, a delivery's, a schedule's tick) and compared
        with (is a timer due). Workers sharing a world agree on it whatever their own clocks
        say: a shared world gives its database's clock (this process's, corrected by the
        offset it measured); the others give this process's."""
        return local_now()

    # -- families and their journals ---------------------------------------------------------
    @abstractmethod
    def create_family(
        self,
        root: str,
        bodies: list[bytes],
        *,
        streams: Mapping[str, tuple[str, int]] | None = None,
        hooks: Mapping[str, str] | None = None,
    ) -> list[int]:
        """Create a family whose journal starts with the records `bodies` (`encode`d), durably;
        `RunExistsError` if it exists.

        A fork (`streams` or `hooks` given, even empty) starts from more: stream `name`
        holding the first `n` items of stream `source` for each `name: (source, n)` of
        `streams` (items copied as stored, none shared), and each `token: run_id` of `hooks`
        claimed. Whoever sees the family sees all of it: the streams and hooks are durable
        first, so a crash leaves at most a remnant (`remnants`), never a family missing part
        of them; the stream items this object appended before the call are durable before
        the family too (a list naming the fork, written first, is never lost while the fork
        stays). `HookConflictError` if another run holds a token (nothing is created then but
        what a remnant holds)."""

    @abstractmethod
    def families(self) -> list[str]:
        """Root run ids of every family."""

    @abstractmethod
    def heads(
        self, *, roots: Sequence[str] | None = None, inbox: bool = True, runnable: bool = False
    ) -> list[FamilyHead]:
        """The head (None: missing or unreadable: rebuild it from the journal) and inbox mark
        of every family, in root order: one call, however many families there are (a network
        world answers it with one query). `roots`: of those families only (a root that is no
        family is left out: `heads(roots=[r])` is empty when `r` does not exist).
        `inbox=False`: the caller needs no inbox marks (a listing); a world may then leave
        them -1 (a local world would read each inbox's header for them). `runnable=True`: the
        caller looks for work (`Engine.runnable`, a shared world's sweep); a world may leave
        out the families whose head says they have none now (`head_wake`) and those a live
        owner holds, so that parked families cost nothing; the caller still checks each
        head."""

    @abstractmethod
    def family_usage(self, root: str, *, streams: Sequence[str] | None = None) -> FamilyUsage:
        """What the family stores (journal, inbox, head and its streams) and when it last
        changed; `FamilyUsage(0, 0.0)` for one that stores nothing. `streams`: the family's
        streams, when the caller knows them (None: all of `stream_names(family=root)`, which may
        cost a listing of every stream)."""

    @abstractmethod
    def stream_names(self, *, family: str | None = None) -> list[str]:
        """Every stored stream's name, sorted; with `family`, those of that family only
        (`stream_family`)."""

    @abstractmethod
    def remnants(self) -> list[str]:
        """Roots that have something stored (streams, hooks, part of a family) but no family:
        what a creation or a `remove_family` left when its process died. Sorted."""

    @abstractmethod
    def remove_family(self, root: str, *, inbox_mark: int | None = None) -> bool:
        """Remove the family: the hooks its runs own, its streams, then the family itself; True
        if it did. The caller holds the family's lease (a remnant has none to hold).

        Deliveries are excluded while it decides and removes: with `inbox_mark`, a family whose
        `inbox_end` is no longer the mark (a delivery came after the caller decided) is left
        as it is (False). A `deliver` or `acquire` that comes after finds no family
        (`RunNotFoundError`). A removal interrupted by a crash leaves a remnant (or a family
        still listed), which the next call removes."""

    def verify(self, *, repair: bool = False) -> list[Finding]:
        """Check everything stored without changing it: one `Finding` per stored object.
        `repair=True`: fix what can be fixed without losing anything (torn tails cut, damaged
        data set aside, never deleted) and say what it did, one `Finding` each."""
        return []

    @abstractmethod
    def load(self, root: str, start: int = 0) -> FamilyLog:
        """Records from position `start` on (header excluded); an invalid start reads all."""

    @abstractmethod
    def commit(
        self, root: str, bodies: Sequence[bytes] = (), *, head: Head | None = None
    ) -> list[int]:
        """Append records (each the `encode`d body of one; the world frames and checksums
        them) to the family's journal, durably, after the stream items appended before them,
        then replace its head (status cache) by `head` if given: the head never runs ahead of
        the records. Returns the records' positions. The caller holds the lease."""

    # -- inbox ---------------------------------------------------------------------------------
    @abstractmethod
    def deliver(self, root: str, token: str, payload: Any) -> int:
        """Append a delivery durably from any process; return its id."""

    @abstractmethod
    def read_inbox(self, root: str, start: int = 0) -> tuple[list[InboxItem], int]:
        """Deliveries with id >= `start`, and the position to read on from next time."""

    @abstractmethod
    def inbox_end(self, root: str) -> int:
        """A cheap mark that grows with every delivery (compare to detect new ones)."""

    # -- hooks -----------------------------------------------------------------------------------
    @abstractmethod
    def set_hook(self, token: str, run_id: str | None, *, holder: str | None = None) -> str | None:
        """Make `run_id` the owner of `token` (None: free it) if `holder` owns it now (None:
        no one does), durably. Claim: `set_hook(t, run)` returns the owner afterwards
        (another run than `run`: a conflict); release: `set_hook(t, None, holder=run)`
        returns None."""

    @abstractmethod
    def hook_owner(self, token: str) -> str | None: ...

    # -- ownership and wake-ups ------------------------------------------------------------------
    @abstractmethod
    def acquire(self, root: str, wait: float | None = None) -> Lease:
        """Take the family lease (waiting up to `wait` seconds); else `OwnershipError`."""

    @abstractmethod
    async def wait_inbox(self, root: str, mark: int, timeout: float) -> bool:
        """Wait until `inbox_end(root)` differs from `mark`; False on timeout."""

    # -- streams -----------------------------------------------------------------------------------
    @abstractmethod
    def stream_append(self, name: str, item: Any) -> int:
        """Append an item, durably, readable by others; its index. A family's stream
        (`stream_family`) takes appends only from the world object holding the family's lease
        while one holds it (a world may refuse another's with `OwnershipError` — PostgreSQL
        does — or fence the owner's next write);
        a stream of no family takes appends from anyone."""

    @abstractmethod
    def stream_read(self, name: str, start: int = 0, end: int | None = None) -> list[Any]:
        """Items `start` up to `end` (exclusive); negative `start` counts from the tail."""

    @abstractmethod
    def stream_length(self, name: str) -> int: ...

    @abstractmethod
    def stream_versions(self, names: Sequence[str]) -> list[Hashable]:
        """A cheap change token for each named stream (None: no such stream): equal tokens
        mean nothing was appended, rewritten or repaired in between. One call for many."""

    def stream_digest(self, name: str, count: int, after: tuple[int, Any] | None = None) -> Any:
        """A checksum of the stored form of the first `count` items (None: this world cannot
        tell cheaply). Equal digests mean those items are unchanged, so a reader may keep
        what it derived from them instead of reading them again; damage changes it.

        `after=(count0, digest0)`: the caller has just seen `digest0` be the digest of the
        first `count0` items; a world may then checksum only the items after them."""
        return None

    @abstractmethod
    def stream_tail(self, name: str, start: int = 0) -> AsyncIterator[tuple[int, Any]]:
        """Stored items from `start`, then live ones as any process appends them."""

    def close(self) -> None:  # noqa: B027 - most worlds hold nothing to release
        """Release open files; the world stays usable afterwards."""
