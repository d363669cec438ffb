"""The engine's private side of a built-in store: when what it appends becomes durable.

The public `World` says every write is durable when it returns. A built-in store does better
by deferring (a local journal's `fdatasync`, a PostgreSQL owner's batch) and lets the engine,
which knows what follows, say when it must not wait any longer: the order of each append
(`Order`), before an effect (`Store.before_effect`), and where a call is made from an event
loop (`Store.io`). It also holds what only the engine and the maintenance tools ask of a
store (one family's head, whether it exists, inbox compaction, the damage check, the timers
watch). A world of the public interface alone has none of this: `scheduling` gives the engine
one that says each call is durable when it returns and answers the rest from public calls.
"""

from __future__ import annotations

import asyncio
import enum
from abc import abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ._world import FamilyHead, Head, World


class IO(enum.Enum):
    """How a world's calls wait (`Store.io`), which says where a caller on an event loop
    makes them."""

    MEMORY = "memory"  # they return at once: called inline
    # Durable ones wait for a disk: made on threads while several families are driven (their
    # fsyncs then overlap: a group commit), inline for one (a thread hop costs more).
    DISK = "disk"
    # Every call is a round trip: made on threads while several families are driven, inline
    # for one while they are quick (no hop to a thread: `_offload.Placement`).
    NETWORK = "network"


@dataclass(frozen=True, slots=True)
class Order:
    """What an appended record waits for, and what waits for it (`Store.append`).

    `lazy`: losing the record in a crash is harmless (a replay writes it again: a `park`, a
    received delivery, a new generation, a child's start); it is durable no later than the
    family's next record that is not lazy, and needs no wait of its own.
    `streams`: a `stream_mark()`: the stream items this world object appended from that mark
    on are durable before the record is (a replay will not append them again: a step's
    function appended them, or the run ends or moves on); 0 covers every one, None none
    (a replay re-runs the code that appended them). A world that commits every call
    transactionally meets both by committing each call before it returns.
    `unobserved`: the record of a step no one observes (`ordered=False`, a model's request),
    or of a run's end: a crash that loses it with the items before it only runs the step (the
    run's code to its end) again, so a store may keep both for its next commit rather than
    make one of their own (that commit still comes before any effect or reader that follows
    them).
    """

    lazy: bool = False
    streams: int | None = None
    unobserved: bool = False


RECORD = Order()  # durable before anything that follows it; the stream items before it wait
LAZY = Order(lazy=True)


class Scheduling:
    """What the engine asks of a store about durability and waiting; the defaults are those of
    a world whose every call is durable when it returns and never waits long."""

    # How long its calls wait, so callers on an event loop know where to make them (`IO`,
    # `_offload.Placement`): off the loop, on threads (calls for different families may
    # overlap; calls for one family never do), so one session's wait does not stall the
    # others or the HTTP server; inline where a hop to a thread would cost more.
    io: IO = IO.MEMORY

    @abstractmethod
    def append(self, root: str, bodies: list[bytes], order: Order = RECORD) -> list[int]:
        """`World.append`, saying what the records wait for and what waits for them
        (`Order`). Whatever it says, nothing is seen or done after a non-lazy record before
        that record is durable: the store makes it durable before the next `before_effect`
        returns and before it stores anything a reader could see (a head, a delivery, a hook,
        a stream item)."""

    def append_waits(self, root: str, order: Order) -> bool:
        """Whether `append(root, ..., order)` may wait now (for a disk or a round trip): a
        caller on an event loop then makes it where `io` says, else inline. A store that only
        keeps the record for its next write (and blocks on nothing) says False."""
        return self.io is IO.NETWORK or not (order.lazy and order.streams is None)

    def before_effect(self, *, observed: bool = True) -> None:
        """Call before an effect outside the world begins (a step's function): every record
        appended so far is durable before it, and every stream item appended so far can be
        read by anyone who sees the effect. `observed=False`, for an effect no one observes
        (a request to a model): the store may let the effect begin while it makes them so, and
        wait a moment (a few ms) for the next effect to make them so with its own; they are
        still durable before anything that follows is stored or seen."""

    def stream_mark(self) -> int:
        """A mark for `Order.streams`: the stream items this store object appended from now
        on (a count; the engine compares it around a step to know whether it appended)."""
        return 0

    def timers_version(self) -> Hashable:
        """A cheap token that changes whenever a process writes a head with a run parked on a
        timer: equal tokens, no run parked on a new timer between. What a server waits on
        (`wait_timers`) to re-read those heads (`timers_since`) when another process put a run
        to sleep, instead of reading them all every few seconds. None: this store cannot
        tell."""
        return None

    def timers_since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        """The version now, and the roots whose heads were written with a run parked on a
        timer since `version` was (None: the store cannot say which: read every head)."""
        return self.timers_version(), None

    async def wait_timers(self, version: Hashable, timeout: float) -> bool:
        """Wait until `timers_version()` differs from `version`; False on timeout. A store
        that cannot tell waits out the timeout (its caller looks at the heads on its own
        schedule, as a shared world's sweep does)."""
        await asyncio.sleep(max(timeout, 0.0))
        return False

    def compact_inbox(self, root: str, keep_from: int) -> bool:
        """Drop deliveries below id `keep_from` (none of them is read again) if that saves
        enough; ids of the rest do not change. True if it did; a plain world keeps all."""
        return False

    def inbox_name(self, root: str) -> str:
        """Where the family's inbox is, for error messages."""
        return f"inbox of run family {root}"

    def check_intact(self, root: str) -> None:  # a store without damage to find
        """Raise `CorruptJournalError` if what the store holds for family `root` (its
        journal, inbox, and streams named `<kind>.<root>[...]`) holds damage no writer may go
        on past. The engine checks it before it drives a family: a damaged one takes no
        writes."""

    @abstractmethod
    def read_head(self, root: str) -> Head | None:
        """The family's head (`World.heads`), or None when missing or unreadable."""

    @abstractmethod
    def family_exists(self, root: str) -> bool:
        """Whether family `root` exists (`World.heads(roots=[root])`)."""

    def known_inbox_end(self, root: str) -> int | None:
        """`inbox_end` when the store knows it without a wait (a network store hearing every
        delivery to a family it leases); None: ask `inbox_end`. A caller on an event loop
        may then skip a trip off the loop when nothing came."""
        return None


class Store(World, Scheduling):
    """A built-in store: the public `World` and the engine's `Scheduling` of it."""

    @abstractmethod
    def append(self, root: str, bodies: list[bytes], order: Order = RECORD) -> list[int]:
        """See `Scheduling.append`."""

    @abstractmethod
    def write_head(self, root: str, head: Head) -> None:
        """Replace the family's head (`commit` with no records)."""

    def commit(
        self, root: str, bodies: Sequence[bytes] = (), *, head: Head | None = None
    ) -> list[int]:
        positions = self.append(root, list(bodies)) if bodies else []
        if head is not None:
            self.write_head(root, head)
        return positions

    def heads(
        self, *, roots: Sequence[str] | None = None, inbox: bool = True, runnable: bool = False
    ) -> list[FamilyHead]:
        found = self.families() if roots is None else sorted(filter(self.family_exists, roots))
        return [FamilyHead(r, self.read_head(r), self.inbox_end(r) if inbox else -1) for r in found]

    @abstractmethod
    def claim_hook(self, token: str, run_id: str) -> str:
        """Claim `token` for `run_id`; return the owner afterwards (another id = conflict)."""

    @abstractmethod
    def release_hook(self, token: str, run_id: str) -> None:
        """Release `token` if `run_id` owns it."""

    def set_hook(self, token: str, run_id: str | None, *, holder: str | None = None) -> str | None:
        if holder is not None:
            self.release_hook(token, holder)
        return None if run_id is None else self.claim_hook(token, run_id)


class _Plain(Scheduling):
    """The scheduling of a world of the public interface alone: every call durable on return."""

    def __init__(self, world: World) -> None:
        self._world = world

    def append(self, root: str, bodies: list[bytes], order: Order = RECORD) -> list[int]:
        return self._world.commit(root, bodies)

    def read_head(self, root: str) -> Head | None:
        return next((f.head for f in self._world.heads(roots=[root], inbox=False)), None)

    def family_exists(self, root: str) -> bool:
        return bool(self._world.heads(roots=[root], inbox=False))


def scheduling(world: World) -> Scheduling:
    """How the engine schedules durability with `world`: its own if a built-in store."""
    return world if isinstance(world, Scheduling) else _Plain(world)
