"""What the harness needs from the execution layer: durable actions, events, history.

The execution layer implements :class:`StepHost` on top of a world workflow context; the
harness never sees the world.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

from eve_cli._events import Event, EventData, EventType
from eve_cli._keys import DeltaKeys, Key, Turn
from eve_cli._loader import AgentDefinition
from eve_cli._session import Snapshot
from eve_cli._tools import Tool
from eve_cli.harness._outcome import ArgumentError, CallResult, ToolCallRecord
from eve_cli.models import Message, Model, Price, Reasoning, ToolSpec


@dataclass(slots=True)  # (as ModelAnswer, not frozen: one a step)
class Reply:
    """A model call's answer, the one form the harness gives the host to keep."""

    text: str
    tool_calls: list[ToolCallRecord]
    usage: dict[str, int]  # {"input", "output"[, "cacheRead", "cacheWrite", "reasoning"]}
    call_errors: dict[str, ArgumentError] = field(default_factory=dict)  # by call id
    reasoning: Reasoning | None = None  # kept byte-exact in the history item


class KeptReply(TypedDict, total=False):
    """What a model call's action journals: its reply (:meth:`StepHost.keep_reply`: ``text``,
    or only its length ``ds`` when its delta events hold it; ``calls``: the argument errors
    of its tool calls, by id), or why there is none (``error``; ``cancelled``, with what it
    had streamed, ``partial``)."""

    text: str
    ds: int
    tool_calls: list[ToolCallRecord]
    usage: dict[str, int]
    calls: dict[str, ArgumentError]
    reasoning: Reasoning
    error: str
    cancelled: bool
    partial: str


@dataclass(slots=True)  # (as Reply)
class StoredReply:
    """A model call's reply as stored: its history item and its calls' argument errors."""

    index: int
    call_errors: dict[str, ArgumentError]


class StreamedText(Protocol):
    """The delta events a model call streamed its text into (``harness._deltas.DeltaBuffer``)."""

    def holds(self, text: str) -> bool:
        """Whether this run's events hold ``text`` whole."""
        ...

    def text_events(self) -> tuple[str, list[int]] | None:
        """The text the call's stored delta events hold and their indexes, in text order
        (None: they are not one unbroken run from the start)."""
        ...


class ActionRun(Protocol):
    """The durable action whose function is running, as its journal knows it."""

    @property
    def interrupted(self) -> bool:
        """An earlier run of this action began (tracked, or it recorded progress) and never
        ended: a crash interrupted it."""
        ...

    @property
    def began(self) -> float | None:
        """When the first run of this action began (seconds since the epoch; set before its
        function runs)."""
        ...

    @property
    def progress(self) -> Any:
        """The value last recorded with :meth:`record` (by this run or an earlier one)."""
        ...

    @property
    def recorded(self) -> bool:
        """Whether any run of this action recorded progress."""
        ...

    def record(self, value: Any) -> None:
        """Journal ``value`` as the action's progress, durably (from any thread)."""
        ...


class StepHost(Protocol):
    """One session's view of a running turn (or of a driver-level operation)."""

    snap: Snapshot
    turn_id: str | None
    # Who sent the message the turn is serving (its latest, a steer's included) and who
    # created the session (SPEC §18): ``{"subject", "tenant"?}``; None: not known.
    principal: dict[str, str] | None
    initiator: dict[str, str] | None

    @property
    def agent(self) -> AgentDefinition:
        """The agent definition the turn runs (loaded at first use)."""
        ...

    @property
    def session_id(self) -> str: ...

    @property
    def turn(self) -> Turn:
        """The keys of the running turn (inside a turn only; a driver-level operation, such
        as a compaction asked between turns, keys its items by its generation)."""
        ...

    def model(self) -> Model:
        """The model of this turn (built from the current definition and the -m override)."""
        ...

    def price(self) -> Price | None:
        """The price of this turn's model (the agent's ``prices.json``, then the shipped
        table); None when unknown."""
        ...

    def find_tool(self, name: str) -> Tool | None:
        """The agent's tool the model calls ``name``: a local one or an MCP server's, found
        from the name alone (no server is asked, so a replay dispatches as the run did)."""
        ...

    async def turn_tools(self) -> tuple[list[ToolSpec], str]:
        """The MCP servers' tools for this turn's model calls, read from the servers once a
        turn, and a note for the system prompt naming those unavailable. Asked only inside a
        model call's action (a replay does not ask); returns at once for an agent without
        servers."""
        ...

    async def start_tools(self, key: Key, step: int) -> None:
        """Before a model call that runs now (not replayed), list the MCP servers' tools if
        this turn has not (starting the servers this process has not): in a span of its own,
        then an ``mcp.ready`` event under ``key`` with the time it took, so the model call's
        time is its own."""
        ...

    def solo(self) -> bool:
        """Whether this is the only session its process drives now (holding the event loop
        for a moment then stalls no other session)."""
        ...

    async def action(
        self,
        name: str,
        fn: Callable[[], Awaitable[Any]],
        *,
        ordered: bool = True,
        tracked: bool = False,
    ) -> Any:
        """Run ``fn`` as a durable action: journaled once, replayed from the journal after.
        Events and history appended before it are readable by the time ``fn`` runs, unless
        not ``ordered`` (a model call, which nobody can observe while it runs). ``tracked``:
        each run of ``fn`` is journaled as it begins, so a run after a crash knows
        (:meth:`running_action`)."""
        ...

    def running_action(self) -> ActionRun:
        """Inside an action's function: that action's journal state."""
        ...

    def emit(
        self,
        type: EventType,
        data: EventData,
        key: Key,
        step: int | None = None,
        *,
        text: str | None = None,
    ) -> None:
        """Append an event (idempotent by ``key``). ``text``: the text of the history item
        an ``_h`` in ``data`` refers to (what readers see; the writer need not read it)."""
        ...

    def emitted_deltas(self, keys: DeltaKeys) -> list[tuple[int, int, Key]]:
        """``(start, length, key)`` of each delta event of the family ``keys`` (one model
        call's text or reasoning) already stored for this generation."""
        ...

    def emitted_event(self, key: Key) -> Event | None:
        """The event stored under ``key`` in this generation (full field names), if any."""
        ...

    def emitted_index(self, key: Key) -> int | None:
        """The index of the event stored under ``key`` in this generation, if any."""
        ...

    def append_history(self, message: Message, key: Key) -> int:
        """Append a message to the session history (idempotent by ``key``); its index."""
        ...

    def store_history(self, message: Message, key: Key, events: list[int] | None = None) -> int:
        """Store a history item under ``key`` (or find the one stored there) without taking it
        into the window: what a step function does (a replay then calls :meth:`adopt_history`
        with the index the step returned). ``events``: the delta events (indexes, in text
        order) that hold the reply's ``content`` exactly; the item refers to them instead."""
        ...

    def stored_history(self, key: Key) -> int | None:
        """The index of the history item stored under ``key``; None when there is none."""
        ...

    def keep_reply(self, reply: Reply, streamed: StreamedText) -> KeptReply:
        """What the model call's step journals for ``reply`` (inside the step function; the
        form is the storage's business: text the delta events hold is not stored again)."""
        ...

    def store_reply(self, kept: KeptReply, key: Key, streamed: StreamedText) -> StoredReply | None:
        """The reply a model call's step journaled (``kept``, from :meth:`keep_reply`) stored
        in history under ``key`` unless it is there (after the step, in workflow code a replay
        repeats); None when its text is lost."""
        ...

    def adopt_history(self, index: int, message: Message | None = None) -> Message:
        """Take stored item ``index`` into the window; returns it as stored."""
        ...

    async def load_history(self) -> None:
        """Read the window now (where the world wants reads made: off the event loop on a
        network world), unless what is held is current: :meth:`read_history`,
        :meth:`history_tokens`, :meth:`summary_text` and :meth:`history_index` then read
        nothing. Asked before them; they still read (on the loop) when it was not."""
        ...

    def read_history(self) -> list[Message]:
        """The model's view: the summary (if any) then the messages since the window start."""
        ...

    def history_tokens(self) -> tuple[int, int]:
        """How many messages :meth:`read_history` returns and the sum of their token
        estimates (``models._tokens.message_tokens``), without building the list."""
        ...

    def summary_text(self) -> str | None:
        """The current compaction summary (None before the first)."""
        ...

    def history_index(self, position: int) -> int:
        """The history-stream index of message ``position`` of the window (summary not
        counted); the window's end for ``position == len(window)``."""
        ...

    def now(self) -> float:
        """Deterministic current time, seconds since the epoch."""
        ...

    async def cancel_requested(self) -> bool:
        """At an action boundary: whether a cancel was delivered to the turn (durably: a replay
        answers the same). Other deliveries taken while looking are kept for the turn to
        apply after the step."""
        ...

    async def sleep_until(self, until: float) -> str | None:
        """Park the turn until ``until`` (seconds since the epoch) or a delivery to the
        session, whichever comes first, durably (a replay waits for the same deadline). The
        delivery is kept for the turn to apply after the step, as :meth:`cancel_requested`
        keeps them. None at the deadline, else what woke it (``a message``, ``a cancel``)."""
        ...

    def cancel_signal(self) -> asyncio.Future[None]:
        """A future done once a cancel of this session is asked of this process (for racing
        a model call against it; done already if one was); the caller cancels it when it no
        longer waits. A future, not a coroutine: no task to start and stop per call."""
        ...

    async def run_subagent(self, name: str, task: str, call_id: str, step: int) -> CallResult:
        """Run a sub-agent as a child session; its result for the model."""
        ...
