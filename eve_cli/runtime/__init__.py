"""The runtime facade: what the CLI and the HTTP channel call (docs/RUNTIME.md).

``Runtime`` opens a world (``LocalWorld`` under the data directory by default), loads the agent
folder and offers sessions: create, deliver, respond, cancel / clear / compact / reset, drive,
and read-only views (``session``, ``sessions``, ``events``, ``tail``). Delivering never runs
anything: ``drive(sid)`` owns the session and runs it until it waits.

It composes three parts by role, as a workflow SDK splits its client from its worker:
:class:`~eve_cli.runtime._client.Client` (what a caller does: create, deliver, respond,
operate, fork), :class:`~eve_cli.runtime._worker.Worker` (what drives sessions: drive, timers,
schedules) and :class:`~eve_cli.runtime._reader.Reader` (views, listings, events, history),
over the world and agent they share (:class:`~eve_cli.runtime._core.Core`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from eve_cli import _store_migration  # noqa: F401  (registers eve's part of migrations)
from eve_cli._events import Event
from eve_cli._facade import By, JsonSchema, SessionStatus, TurnPolicy
from eve_cli._loader import AgentDefinition, AgentLoadError
from eve_cli._schedules import Schedule, ScheduleRow
from eve_cli.execution import (
    PAGE,
    Executor,
    Forked,
    ForkPointError,
    Lineage,
    SessionView,
)
from eve_cli.runtime._client import Client, DeliveryReceipt
from eve_cli.runtime._core import (
    Core,
    InvalidSessionIdError,
    RuntimeErrorBase,
    SessionNotFoundError,
    open_world,
)
from eve_cli.runtime._reader import Reader
from eve_cli.runtime._worker import Worker
from world import Engine, World, default_data_dir, store_identity

if TYPE_CHECKING:
    from eve_cli.models import Message

__all__ = [
    "AgentLoadError",
    "DeliveryReceipt",
    "ForkPointError",
    "InvalidSessionIdError",
    "Runtime",
    "RuntimeErrorBase",
    "SessionNotFoundError",
    "default_data_dir",
    "open_world",
]

T = TypeVar("T")


class Runtime:
    """Sessions of one agent folder on one world: the caller's, the driver's and the reader's
    calls in one object (``client``, ``worker``, ``reader``: each part alone)."""

    def __init__(
        self,
        data_dir: Path | str | None = None,
        agent_dir: Path | str | None = None,
        model: str | None = None,
        *,
        world: World | None = None,
        load_agent: bool = True,
    ) -> None:
        """Open the world and load the agent.

        ``data_dir`` may be a ``postgresql://`` URL: the world is that database then.
        ``load_agent=False`` opens a reader: the agent folder is loaded on first use of
        ``agent`` (listing sessions never uses it), and a broken folder then serves the
        built-in agent, so a broken ``./agent`` stops no one reading sessions.

        Raises:
            AgentLoadError: the agent folder is broken (message starts with ``file:line:``).
            ValueError: ``model`` is not a valid model string.
        """
        self.core = Core(data_dir, agent_dir, model, world, load_agent)
        self.reader = Reader(self.core)
        self.client = Client(self.core, self.reader)
        self.worker = Worker(self.core, self.reader, self.client)

    # -- what the parts share ---------------------------------------------------------------
    @property
    def world(self) -> World:
        return self.core.world

    @property
    def engine(self) -> Engine:
        return self.core.engine

    @property
    def executor(self) -> Executor:
        return self.core.executor

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @property
    def agent_dir(self) -> Path:
        return self.core.agent_dir

    @property
    def model(self) -> str | None:
        return self.core.model

    @property
    def agent(self) -> AgentDefinition:
        """The agent folder's current definition (loaded now by a reader's first use)."""
        return self.core.agent

    def reload_agent(self) -> AgentDefinition:
        """Reload the agent folder now.

        Turns always use the current definition of their folder (reloaded when its files
        change); a broken edit keeps the last good definition serving. This reports the error.

        Raises:
            AgentLoadError: the folder is broken; the previous definition stays in use.
        """
        return self.core.reload_agent()

    def agent_error(self) -> str | None:
        """Why the agent folder does not load as it is now (None: it loads); meanwhile the last
        good definition serves. Looks at the files' signatures, loading only if they changed."""
        return self.core.agent_error()

    def store_id(self) -> str | None:
        """The id of the store this runtime's world is, read from it now
        (`world.store_identity`: made once, when the store was created)."""
        return store_identity(self.world).id

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Make a call of this facade's that reads or writes the world from an event loop:
        off the loop on a world whose every call is a round trip (`World.io`: the loop goes
        on driving other sessions and serving requests), inline on the others."""
        return await self.core.call(fn, *args)

    def close(self) -> None:
        self.core.close()

    # -- the caller's calls (`Client`) ------------------------------------------------------
    async def create_session(
        self,
        mode: str | None = None,
        model: str | None = None,
        operation_id: str | None = None,
        *,
        task: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> str:
        """Create a session durably (it runs when driven); idempotent by ``operation_id``.
        ``task``: its first message, part of its creation (delivered once, whoever creates
        it); ``meta``: more constants kept with it (``engine.info(sid).meta``)."""
        sid, _ = await self.client.create_session(mode, model, operation_id, task, meta)
        return sid

    async def start_session(
        self,
        message: str | None,
        *,
        operation_id: str | None = None,
        mode: str | None = None,
        output_schema: JsonSchema | None = None,
        meta: Mapping[str, Any] | None = None,
        by: By | None = None,
        turn_policy: TurnPolicy = "steer",
    ) -> tuple[str, bool, DeliveryReceipt | None]:
        """Create a session whose first message (if any, sent ``by``) is part of its creation
        record: with ``operation_id``, every process and worker that starts it finds the one
        session, the message is stored once and exactly one caller is told it created it.
        ``meta``: more constants kept with it. Returns the session's id, whether this call
        created it and the message's receipt: ``started`` for its creator; delivered now
        (``turn_policy``) when an earlier create of the operation made it without one; None
        without a message, or when the session already had its message."""
        return await self.client.start_session(
            message, operation_id, mode, output_schema, meta, by, turn_policy
        )

    async def move_session(
        self, sid: str, agent: str, agent_dir: str | None = None, *, by: By | None = None
    ) -> DeliveryReceipt:
        """Give session ``sid`` to agent ``agent`` (its name; ``agent_dir``: a folder of it,
        used where no process serves that name): applied by its driver before anything
        delivered after it, recorded as ``session.moved``, its next turns run that agent.
        Rejected while a turn is under way (answer or cancel it first) or once it ended."""
        return await self.client.move(sid, agent, agent_dir, by)

    def operation_session(self, operation_id: str) -> str | None:
        """The id of the session a create with ``operation_id`` made, if it exists."""
        return self.client.operation_session(operation_id)

    def ever_delivered(self, sid: str) -> bool:
        """True once anything was delivered to ``sid`` (its inbox was ever written) or it was
        created with its first message: a create retried by its operationId delivers its
        message only while this is False."""
        return self.client.ever_delivered(sid)

    async def deliver(
        self,
        sid: str,
        message: str,
        turn_policy: TurnPolicy = "steer",
        output_schema: JsonSchema | None = None,
        *,
        by: By | None = None,
    ) -> DeliveryReceipt:
        """Deliver a user message; the receipt says whether it starts, steers or queues.
        ``output_schema``: the JSON schema the answer to the turn it starts follows (a
        ``result`` event; in place of the agent's own); ``by``: who sent it (recorded in its
        ``message.received`` event, read by tools as ``ctx.principal``)."""
        return await self.client.deliver(sid, message, turn_policy, output_schema, by)

    async def respond(
        self, sid: str, responses: Sequence[Mapping[str, Any]], *, by: By | None = None
    ) -> DeliveryReceipt:
        """Answer pending input requests (approvals: ``approved``/``always``; questions:
        ``answer``; an interrupted call's outcome: ``outcome`` rerun|failed|result, with
        ``result``). An answer to a request that is not pending in this session, or of the
        wrong shape, is rejected before anything is written."""
        return await self.client.respond(sid, responses, by)

    async def cancel(self, sid: str, *, by: By | None = None) -> DeliveryReceipt:
        """Cancel the running turn (it ends with ``turn.cancelled``): durably, at the next
        action boundary of whichever process drives the session; a model call this process
        is streaming for it stops now."""
        return await self.client.cancel(sid, by)

    async def clear(self, sid: str, *, by: By | None = None) -> DeliveryReceipt:
        """Wipe the model history; identity and state stay."""
        return await self.client.operation(sid, "clear", by)

    async def compact(self, sid: str, *, by: By | None = None) -> DeliveryReceipt:
        """Summarise the history now."""
        return await self.client.operation(sid, "compact", by)

    async def reset(self, sid: str, *, by: By | None = None) -> DeliveryReceipt:
        """Wipe history and state; the session id stays."""
        return await self.client.operation(sid, "reset", by)

    async def fork(self, sid: str, at: str | None = None, *, by: By | None = None) -> Forked:
        """A new session whose history and state are ``sid``'s as of checkpoint ``at``
        (``T``: after turn T; ``T.S``: after step S of turn T; None: the latest), recorded
        as its fork; ``sid`` is only read (another process may drive it). Returns
        ``{"sessionId", "forkedFrom", "checkpoint"}``; `ForkPointError` (a LookupError) when
        there is no such checkpoint, ValueError for a malformed ``at``."""
        return await self.client.fork(sid, at, by)

    # -- the driver's calls (`Worker`) ------------------------------------------------------
    @overload
    async def drive(
        self, sid: str, *, wait: float | None = None, view: Literal[True] = True
    ) -> SessionView: ...

    @overload
    async def drive(
        self, sid: str, *, wait: float | None = None, view: Literal[False]
    ) -> SessionStatus: ...

    async def drive(
        self, sid: str, *, wait: float | None = None, view: bool = True
    ) -> SessionView | SessionStatus:
        """Own the session and run it until it waits, parks or ends; returns its view
        (``view=False``: only ``{"id", "status"}``, from the latest events: the whole view
        folds every event of the session, which costs what the session's age does).

        Raises:
            world.OwnershipError: another process drives this session.
        """
        if view:
            return await self.worker.drive(sid, wait=wait)
        return await self.worker.drive(sid, wait=wait, view=False)

    async def wait(self, sid: str, timeout: float) -> bool:
        """Wait, holding no lock, until the session has a delivery (from any process) or a due
        timer; False on timeout."""
        return await self.worker.wait(sid, timeout)

    def resumable(self) -> list[str]:
        """Sessions with work to do now (interrupted, or with undelivered input)."""
        return self.worker.resumable()

    def now(self) -> float:
        """The world's clock (`World.now`): what session timers and schedule ticks are
        compared with, the same on every worker sharing the world."""
        return self.core.world.now()

    def timers(self, sid: str | None = None) -> dict[str, float]:
        """When each session parked on a timer (a sleeping turn) is due, by session id
        (seconds since the epoch): every session's (one read of the heads), or ``sid``'s."""
        return self.worker.timers(sid)

    def timers_version(self) -> Hashable:
        """A token that changes when any process puts a session to sleep on this world (None:
        the world cannot tell); what :meth:`wait_timers` compares."""
        return self.worker.timers_version()

    def timers_since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        """The version now, and the sessions put to sleep since ``version`` (None: the world
        cannot say which; read every timer)."""
        return self.worker.timers_since(version)

    async def wait_timers(self, version: Hashable, timeout: float) -> bool:
        """Wait until :meth:`timers_version` differs from ``version`` (a session was put to
        sleep here or by another process); False on timeout."""
        return await self.worker.wait_timers(version, timeout)

    def schedules(self) -> tuple[list[Schedule], list[str]]:
        """The agent folder's schedules, and a ``file:line: what`` line per broken file."""
        return self.worker.schedules()

    def schedule_sessions(self) -> dict[str, list[tuple[float, str]]]:
        """The sessions each schedule of this agent started, by schedule name: ``(tick,
        session id)``, oldest first (a session run by hand counts with the time it was
        asked for)."""
        return self.worker.schedule_sessions()

    def schedule_ticks(self) -> dict[str, float]:
        """The latest tick each schedule of this agent started a session for (runs asked for
        by hand not counted)."""
        return self.worker.schedule_ticks()

    async def run_schedule(self, schedule: Schedule, tick: float) -> tuple[str, bool]:
        """The session of ``schedule``'s ``tick``, started unless it exists; and whether this
        call started it. Its id derives from the agent, the schedule and the tick, and its
        first message is part of its creation: one session per tick, however many processes
        (restarts, workers) try."""
        return await self.worker.run_schedule(schedule, tick)

    async def run_schedule_now(self, name: str) -> str:
        """Start a session of schedule ``name`` now (by hand: not a tick); its id.
        `LookupError` when the agent has no such schedule."""
        return await self.worker.run_schedule_now(name)

    def schedule_rows(self) -> tuple[list[ScheduleRow], list[str]]:
        """What `eve schedules` and `GET /eve/v1/schedules` list: per schedule its file's
        settings, next tick, last run, how many sessions it made and the latest 10 of them;
        and the broken files."""
        return self.worker.schedule_rows()

    # -- the reader's calls (`Reader`) ------------------------------------------------------
    def session(
        self, sid: str, turns: int | None = PAGE, from_turn: int | None = None
    ) -> SessionView:
        """The session's view: status, pending requests and a page of its turns with steps
        and actions: the latest ``turns`` (None: all), or ``turns`` from number
        ``from_turn`` on (None: all from there); ``turnCount`` says how many it has."""
        return self.reader.session(sid, turns, from_turn)

    def sessions(self) -> list[dict[str, Any]]:
        """One row per session, most recently active first (reads only each stream's tail);
        each a `SessionRow`, open to what a caller adds (a listing's live status, a title)."""
        return self.reader.sessions()

    def events(
        self, sid: str, start: int = 0, *, texts: bool = True, end: int | None = None
    ) -> list[Event]:
        """Stored events from ``start`` (negative counts back from the tail) to ``end`` (not
        included; default: all), with indexes (``texts=False``: message texts left empty,
        which spares reading them)."""
        return self.reader.events(sid, start, texts=texts, end=end)

    def tail(self, sid: str, start: int = 0) -> AsyncIterator[Event]:
        """Stored events from ``start``, then live ones as they are appended (any process)."""
        return self.reader.tail(sid, start)

    def history(self, sid: str) -> list[Message]:
        """The messages the model would see at the session's next turn (summary first).

        Read from the snapshot the last finished turn left; reads the session's journal, so it
        is meant for inspection and tests, not hot paths.
        """
        return self.reader.history(sid)

    def lineage(self, sid: str) -> Lineage:
        """``{"forkedFrom": {"session", "checkpoint", "at"} | None, "forks": [ids]}``: where
        ``sid`` was forked from, and the sessions forked from it (reads its fork list and each
        fork's meta, not every head)."""
        return self.reader.lineage(sid)

    def owner(self, sid: str) -> By | None:
        """Who created session ``sid`` (SPEC §18; None: made without principals); the
        session's owner and ``admin`` principals may see it, no one else."""
        return self.reader.owner(sid)

    def stored_model(self, sid: str) -> str | None:
        """The model string the session was started with (``-m``); None: its agent's own."""
        return self.reader.stored_model(sid)
