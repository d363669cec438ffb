"""The harness's :class:`~eve_cli.harness._host.StepHost` on a world workflow context.

Durable actions are world steps; events and history are keyed streams (idempotent appends);
the model is resolved from the current agent definition (never persisted, D8).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from eve_cli import _tracing
from eve_cli._events import Event, EventData, EventType
from eve_cli._keys import DeltaKeys, Key, Turn
from eve_cli._loader import AgentDefinition
from eve_cli._session import (
    SUMMARY_ROLE,
    Delivered,
    Snapshot,
    events_stream,
    history_stream,
    session_base,
    summary_message,
)
from eve_cli._tools import Tool
from eve_cli.execution import _observe
from eve_cli.execution._event_form import pack_parts, unpack
from eve_cli.execution._keys import EventKeys, HistoryKeys
from eve_cli.execution._lost import check_window
from eve_cli.execution._replies import (
    call_errors,
    expand,
    journaled,
    referring,
    reply_message,
    reply_text,
    resolve,
)
from eve_cli.execution._stored_events import REF, stored_time
from eve_cli.execution._streams import strip_key
from eve_cli.execution._window import extend_window, window_messages
from eve_cli.execution._workflows import SESSION_WORKFLOW, SessionResult
from eve_cli.harness import (
    CallResult,
    KeptReply,
    Reply,
    StoredReply,
    StreamedText,
    with_ids,
)
from eve_cli.models import Message, Model, Price, ToolSpec, message_tokens, price_for, resolve_model
from world import (
    CorruptJournalError,
    HookHandle,
    StepRun,
    WorkflowContext,
    current_step,
)

if TYPE_CHECKING:
    from eve_cli._tracing._otel import TurnTrace
    from eve_cli.execution._executor import Executor

# Events that mark a point a session can be forked at (`execution._fork`): between turns, at
# the end of a step, and where a turn parks for input (not for a sub-agent: the fork would
# copy the sub-agent's session as it is by then, not as it was).
CHECKPOINTS = frozenset({"session.waiting", "step.completed", "turn.waiting"})


def as_epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


class SessionHost:
    """Everything one workflow invocation (driver or turn) needs to run harness code."""

    def __init__(
        self,
        executor: Executor,
        ctx: WorkflowContext,
        snap: Snapshot,
        agent: AgentDefinition | Callable[[], AgentDefinition],
        turn: Turn | None = None,
        before: Snapshot | None = None,
    ) -> None:
        self.executor = executor
        self.before = before  # a turn's snapshot as it started (its result is the difference)
        self.ctx = ctx
        self.snap = snap
        self._agent = agent  # or how to load it (when first used)
        self._turn = turn
        self.turn_id = turn.id if turn is not None else None
        owner = ctx.meta.get("owner") if snap.id == ctx.run_id.split(".")[0] else None
        self.initiator: dict[str, str] | None = owner if isinstance(owner, dict) else None
        self.principal: dict[str, str] | None = None  # set by the turn's messages
        self.events = executor.keyed(events_stream(snap.id), snap.gen, EventKeys())
        # A session's events count their time from its creation (the root run's meta has it;
        # a sub-agent session's, a child run's, store epoch seconds).
        created = ctx.meta.get("created") if snap.id == ctx.run_id.split(".")[0] else None
        self._since = float(created) if isinstance(created, int | float) else None
        self.history = executor.keyed(history_stream(snap.id), snap.gen, HistoryKeys())
        self._model: Model | None = None
        self.last_text = ""
        # The history window as last read (valid while the snapshot's window is unchanged).
        self._window: list[Message] | None = None
        self._summary: str | None = None
        self._indexes: list[int] = []
        self._window_tokens = 0  # the sum of message_tokens over _window
        self._summary_tokens = 0  # message_tokens of _summary's message (asked every step)
        self._stored: dict[int, Message] = {}  # appended by store_history, not yet adopted
        self._ahead: dict[int, tuple[Any, bool]] = {}  # read_ahead's items (and resolved?)
        self._window_at: tuple[int, int, int | None] = (-1, -1, None)
        self.deferred: list[Delivered] = []  # deliveries a sub-agent took for this turn
        self.handed_back: list[Delivered] = []  # deliveries for the parent turn
        self.cancelled = False  # a cancel was taken or signalled during this turn's step
        self._watch: HookHandle | None = None  # the hook cancel_requested polls
        self._served: tuple[list[ToolSpec], str] | None = None  # MCP tools, read once a turn
        self._trace: TurnTrace | None = None  # this turn's spans (tracing on: _tracing)
        self._traced = False  # whether _trace was decided

    @functools.cached_property
    def agent(self) -> AgentDefinition:
        # Loaded at first use, then an attribute of the instance (asked ~17 times a step).
        return self._agent() if callable(self._agent) else self._agent

    def take_deferred(self) -> list[Delivered]:
        taken, self.deferred = self.deferred, []
        return taken

    @property
    def session_id(self) -> str:
        return self.snap.id

    @property
    def turn(self) -> Turn:
        if self._turn is None:
            raise RuntimeError("a turn's key asked outside a turn")
        return self._turn

    def model_string(self) -> str:
        return self.snap.model or self.agent.model

    def model(self) -> Model:
        if self._model is None:
            base = self.agent.directory
            model = self.model_string()
            self._model = resolve_model(
                model,
                context_window=self.agent.config.context_window,
                base_dir=base if base.is_dir() else None,
                settings=self.agent.settings_for(model),
            )
            if (trace := self.trace()) is not None:
                self._model = trace.model(self._model)
        return self._model

    def price(self) -> Price | None:
        return price_for(self.model_string(), self.agent.prices)

    def trace(self) -> TurnTrace | None:
        """This turn's trace when tracing is on (decided at the turn's first event)."""
        if not self._traced:
            self._traced = True
            if self.turn_id is not None:
                self._trace = _tracing.begin(self._trace_info, self.agent.config.tracing)
        return self._trace

    def _trace_info(self) -> _tracing.TurnInfo:
        assert self.turn_id is not None
        return _tracing.TurnInfo(
            self.snap.id, self.turn, self.agent.name, self.model_string(), self._stored_at
        )

    def _stored_at(self, key: Key) -> float | None:
        """The epoch seconds of this session's stored event ``key`` (None: not stored)."""
        event = self.emitted_event(key)
        at = event.get("at") if event else None
        if not isinstance(at, int | float):
            return None
        return at / 1000 + self._since if self._since is not None else float(at)

    def solo(self) -> bool:
        return self.executor.engine.driving <= 1

    def find_tool(self, name: str) -> Tool | None:
        agent = self.agent
        tool = agent.tools.get(name)
        if tool is None and agent.mcp:
            return self.executor.mcp_tool(agent, name)
        return tool

    async def turn_tools(self) -> tuple[list[ToolSpec], str]:
        if not self.agent.mcp:
            return [], ""
        if self._served is None:
            self._served = await self.executor.mcp_turn_tools(self.agent)
        return self._served

    async def start_tools(self, key: Key, step: int) -> None:
        agent = self.agent
        if not agent.mcp or self._served is not None or self.ctx.is_replaying:
            return
        started = time.monotonic()
        listing: Callable[[], Awaitable[Any]] = self.turn_tools
        if (trace := self._trace if self._traced else self.trace()) is not None:
            listing = trace.action("mcp:tools", listing)
        tools, _ = await listing()
        took = round((time.monotonic() - started) * 1000)
        servers = [server.name for server in agent.mcp]
        self.emit("mcp.ready", {"durationMs": took, "servers": servers, "tools": len(tools)},
                  key, step)  # fmt: skip

    async def action(
        self,
        name: str,
        fn: Callable[[], Awaitable[Any]],
        *,
        ordered: bool = True,
        tracked: bool = False,
    ) -> Any:
        if (trace := self._trace if self._traced else self.trace()) is not None:
            fn = trace.action(name, fn)
        return await self.ctx.step(name, fn, ordered=ordered, tracked=tracked)

    def running_action(self) -> StepRun:
        run = current_step()
        if run is None:
            raise RuntimeError("running_action() outside an action's function")
        return run

    def emit(
        self,
        type: EventType,
        data: EventData,
        key: Key,
        step: int | None = None,
        *,
        text: str | None = None,
    ) -> None:
        # The event as the fold and watchers take it, {type, at, scope..., **data}, and as
        # stored (stored_event(type, now, {scope..., **data}, since)), each built once.
        now, turn_id = stored_time(time.time(), self._since), self.turn_id
        event: Event
        if turn_id is None:
            event = (
                {"type": type, "at": now, **data}
                if step is None
                else {"type": type, "at": now, "stepIndex": step, **data}
            )
        elif step is None:
            event = {"type": type, "at": now, "turnId": turn_id, **data}
        else:
            event = {"type": type, "at": now, "turnId": turn_id, "stepIndex": step, **data}
        stored = pack_parts(type, now, turn_id, step, data)
        if type in CHECKPOINTS and "." not in self.snap.id and data.get("on") != "tasks":
            # Where `eve fork` can cut: the journal position and the history length here
            # (the event's own index is the events' cut). Only a root session's: a fork
            # copies its sub-agents' sessions whole.
            at = self.ctx.checkpoint()
            if at is not None:
                event["ck"] = stored["ck"] = [at, self.snap.history_len]
        index = self.events.append(key, stored)
        if index is not None and _observe.WATCHERS:  # stored now, not found from before
            self._watched(type, event)
        if turn_id is not None and (
            (trace := self._trace if self._traced else self.trace()) is not None
        ):  # the turn's trace (`trace()` inline once decided: asked at every event)
            trace.event(type, key, event, fresh=index is not None)
        if index is None or self._since is None or (REF in data and text is None):
            return
        # The session's kept view takes the event as written: a view after the turn reads
        # none of the turn's events back.
        fold = self.executor.views.fold_at(self.snap.id, index)
        if fold is not None:
            if text is not None and REF in data:
                event["text"] = text
            fold.take(event, round(self._since * 1000))

    def _watched(self, type: EventType, event: Event) -> None:
        """Hand an event stored just now to the watchers."""
        for watch in _observe.WATCHERS:
            watch(self.snap.id, type, event)

    def emitted_deltas(self, keys: DeltaKeys) -> list[tuple[int, int, Key]]:
        stored = (keys.delta_of(text) for text in self.events.keys_starting(keys.head))
        return [delta for delta in stored if delta is not None]

    def emitted_event(self, key: Key) -> Event | None:
        index = self.events.index_of(key)
        items = (
            self.events.world.stream_read(self.events.name, index, index + 1)
            if index is not None
            else []
        )
        return unpack(strip_key(items[0])) if items and isinstance(items[0], dict) else None

    def emitted_index(self, key: Key) -> int | None:
        return self.events.index_of(key)

    def append_history(self, message: Message, key: Key) -> int:
        """Append ``message`` (idempotent by ``key``) and take it into the window."""
        index = self.store_history(message, key)
        # What this call stored is adopted without a read back; so is what an earlier run
        # stored where the item read back would change nothing but the length (no window
        # read yet, not a reply: the driver's replay of its turn's message).
        read = index in self._stored or self._window_current() or message.get("role") == "assistant"
        self.adopt_history(index, None if read else message)
        return index

    def store_history(self, message: Message, key: Key, events: list[int] | None = None) -> int:
        """Store ``message`` under ``key`` (or find what an earlier run stored there) without
        moving the window: safe inside a step function, which a replay does not re-run.
        ``events``: the delta events holding its content exactly (the item refers to them)."""
        fresh = self.history.index_of(key) is None
        item = referring(message, events) if events else message
        index = self.history.put(key, item)
        if fresh:  # stored by this very call: adopting it needs no read back
            # Nor does the next turn's window (a new host): it is kept as a read gives it, the
            # very object this window adopts (so its token estimate is found, not made again).
            text = str(message.get("content")) if events else None
            read = expand(item, text) if text is not None else dict(message)
            self._stored[index] = read
            if not self.executor.wrote_history(self.snap.id, index, read) and text is not None:
                self.executor.remember_text(self.snap.id, index, text)  # (events not read)
        return index

    def stored_history(self, key: Key) -> int | None:
        return self.history.index_of(key)

    def keep_reply(self, reply: Reply, streamed: StreamedText) -> KeptReply:
        return journaled(reply, streamed)

    def store_reply(self, kept: KeptReply, key: Key, streamed: StreamedText) -> StoredReply | None:
        # Stored after the step's record, not inside it: the step then has one stream to
        # make durable before its record (the events), not two.
        errors = call_errors(kept)
        if "text" in kept:
            return StoredReply(self.store_history(reply_message(kept), key), errors)
        index = self.stored_history(key)
        if index is None:
            found = reply_text(kept, streamed)
            if found is None:
                return None
            text, events = found
            index = self.store_history(reply_message(kept, text), key, events)
        return StoredReply(index, errors)

    def adopt_history(self, index: int, message: Message | None = None) -> Message:
        """Take the stored item ``index`` into the window (the snapshot's length moves past
        it); returns it as stored (read back when not given)."""
        snap = self.snap
        stored = self._stored.pop(index, None)
        if message is None:
            message = stored if stored is not None else self._read_item(index)
        cached = self._window_current()
        snap.history_len = max(snap.history_len, index + 1)
        if cached and self._window is not None and message.get("role") != SUMMARY_ROLE:
            # What store_history kept has no key and is no caller's; anything else is copied.
            kept = message if message is stored else strip_key(message)
            self._window.append(kept)
            self._window_tokens += message_tokens(kept)
            self._indexes.append(index)
            self._window_at = self._window_key()
        if message.get("role") == "assistant":
            self.last_text = str(message.get("content") or "")
        return message

    def _window_key(self) -> tuple[int, int, int | None]:
        return self.snap.history_start, self.snap.history_len, self.snap.summary_at

    async def load_keys(self) -> None:
        """Read the keys of the session's streams' current generation now, where the world
        wants reads made (off the event loop on a network world), unless they are known (a
        session this process drove last: always, but in its first generation here)."""
        if not (self.events.loaded and self.history.loaded):
            await self.executor.engine.off_loop(self._load_keys)

    def _load_keys(self) -> None:
        self.events.load()
        self.history.load()

    def _window_current(self) -> bool:
        snap = self.snap  # (`_window_key` inline: asked several times a step)
        return self._window is not None and self._window_at == (
            snap.history_start,
            snap.history_len,
            snap.summary_at,
        )

    def _read_item(self, index: int) -> Message:
        """History item ``index`` as stored (read ahead, else read now)."""
        snap, world = self.snap, self.executor.world
        ahead = self._ahead.pop(index, None)
        if ahead is None:
            read = world.stream_read(history_stream(snap.id), index, index + 1)
        else:
            read = [ahead[0]]
        check_window(snap.id, index, read)
        items = read if ahead is not None and ahead[1] else resolve(world, snap.id, index, read)
        return strip_key(items[0]) if items else {}

    async def read_ahead(self, first: int) -> None:
        """Read history items ``first`` on now, where the world wants reads made (off the
        event loop on a network world): the turn's first message, and on a replay what the
        turn's earlier run stored, which :meth:`adopt_history` then reads no more."""
        await self.executor.engine.off_loop(self._fetch_ahead, first)

    def _fetch_ahead(self, first: int) -> None:
        world, sid = self.executor.world, self.snap.id
        read = world.stream_read(history_stream(sid), first)
        try:  # replies whose text is in events, with it
            items, resolved = resolve(world, sid, first, read), True
        except CorruptJournalError:  # raised when (and if) the item is adopted, as unread
            items, resolved = read, False
        self._ahead = {first + offset: (item, resolved) for offset, item in enumerate(items)}

    async def load_history(self) -> None:
        # A world whose reads are round trips is read on a thread: the loop goes on driving
        # the other sessions meanwhile. This host's session waits for it, and the
        # executor's caches it updates are per session (one driven task at a time).
        if not self._window_current():
            await self.executor.engine.off_loop(self._current_window)

    def summary_text(self) -> str | None:
        """The current compaction summary (None before the first)."""
        self.read_history()
        return self._summary

    def history_index(self, position: int) -> int:
        self.read_history()
        return self._indexes[position] if position < len(self._indexes) else self.snap.history_len

    def read_history(self) -> list[Message]:
        """The model's view of the history: the snapshot's window of the history stream
        (read once per host, then kept in step with appends), the summary first."""
        return window_messages(self._current_window(), self._summary)

    def history_tokens(self) -> tuple[int, int]:
        window = self._current_window()
        if self._summary:
            return len(window) + 1, self._window_tokens + self._summary_tokens
        return len(window), self._window_tokens

    def _current_window(self) -> list[Message]:
        snap = self.snap
        if self._window is None or self._window_at != (  # (`_window_key`; narrows for mypy)
            snap.history_start,
            snap.history_len,
            snap.summary_at,
        ):
            items = self.executor.history_window(snap.id, snap.history_start, snap.history_len)
            state = extend_window(self.executor.world, snap, items, self.executor.window(snap.id))
            self.executor.keep_window(snap.id, state)
            self._window, self._indexes = list(state.messages), list(state.indexes)
            self._summary, self._window_tokens = state.summary, state.tokens
            summary = state.summary
            self._summary_tokens = message_tokens(summary_message(summary)) if summary else 0
            self._window_at = self._window_key()
        return self._window

    def now(self) -> float:
        return as_epoch(self.ctx.now())

    async def cancel_requested(self) -> bool:
        if self.cancelled:
            return True
        if self.turn_id is None:  # a driver-level operation: no turn to cancel
            return False
        # The hook the turn watches: its session's, or a sub-agent's root session's.
        token = self.snap.token or self.snap.cancel_token
        if token:
            if self.executor.cancels.in_flight(self.snap.id):
                await self.executor.cancels.stored(self.snap.id)
            # An empty poll records nothing; one that takes deliveries is journaled, so a
            # replay takes the same ones here. The turn applies them after the step.
            if self._watch is None:
                self._watch = self.ctx.hook(token)
            polled = await self._watch.poll()
            if polled:
                self.deferred.extend(with_ids(polled, self._watch.taken_ids))
        # A sub-agent that ended cancelled handed its cancel back with its result.
        if self.deferred:
            self.cancelled = any(p.get("kind") == "cancel" for p in self.deferred)
        return self.cancelled

    async def sleep_until(self, until: float) -> str | None:
        woke = [p for p in self.deferred if _wakes(p)]
        if woke:  # taken at this step's boundaries already: no sleep at all
            return _woken_by(woke[0])
        when = datetime.fromtimestamp(until, UTC)
        token = self.snap.token or self.snap.cancel_token
        if not token:
            await self.ctx.sleep_until(when)
            return None
        if self._watch is None:
            self._watch = self.ctx.hook(token)
        while True:
            try:
                received = await self._watch.receive(until=when)
                payload = with_ids([received], self._watch.taken_ids)[0]
            except TimeoutError:
                return None
            self.deferred.append(payload)
            if _wakes(payload):
                self.cancelled = self.cancelled or payload.get("kind") == "cancel"
                return _woken_by(payload)

    def cancel_signal(self) -> asyncio.Future[None]:
        return self.executor.cancels.signal(self.snap.id)

    async def run_subagent(self, name: str, task: str, call_id: str, step: int) -> CallResult:
        sub = self.agent.subagents[name]
        child = Snapshot(
            id="",
            agent_dir=str(sub.directory),
            agent_name=self.snap.agent_name,  # its root's (a sub-agent is found by its folder)
            model=None if sub.config.model else self.model_string(),
            mode="task",
            task=task,
            parent=self.snap.id,
            cancel_token=self.snap.token or self.snap.cancel_token,
        )
        handle = await self.ctx.start_child(
            SESSION_WORKFLOW, child.to_data(session_base(self.ctx.meta))
        )
        child_id = handle.run_id
        call = self.turn.tool(call_id)
        self.emit(
            "task.started",
            {
                "taskId": call_id,
                "name": name,
                "childSessionId": child_id,
                "stream": events_stream(child_id),
            },
            call.task_started,
            step,
        )
        self.emit(
            "turn.waiting",
            {"on": "tasks", "turns": self.snap.turns, "steps": self.snap.steps},
            call.task_waiting,
            step,
        )
        result: SessionResult = await handle.result()
        status = result.get("status", "failed")
        self.deferred.extend(result.get("handedBack") or [])
        if status == "cancelled":
            self.deferred.append({"kind": "cancel"})
        content = result.get("text") or result.get("error") or ""
        self.emit(
            "task.settled",
            {
                "taskId": call_id,
                "name": name,
                "childSessionId": child_id,
                "status": status,
                "output": content,
            },
            call.task_settled,
            step,
        )
        if status != "completed":
            return {"content": f"Sub-agent {name} {status}: {content}", "isError": True}
        return {"content": content, "isError": False}


def _wakes(payload: Delivered) -> bool:
    """Whether a delivery ends a sleep: a message for this turn (a queued one waits for the
    next turn, as the sender was told) or a cancel."""
    kind = payload.get("kind")
    return kind == "cancel" or (kind == "message" and payload.get("policy", "steer") == "steer")


def _woken_by(payload: Delivered) -> str:
    """What a delivery that ended a sleep was, in the words the model is told."""
    kind = payload.get("kind")
    return {"message": "a message", "cancel": "a cancel"}.get(str(kind), "a delivery")
