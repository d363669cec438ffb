"""The runtime facade: what the CLI and the HTTP channel call (docs/RUNTIME.md).

``Runtime`` opens a world (``LocalWorld`` under the data directory by default), loads the agent
folder and offers sessions: create, deliver, respond, cancel / clear / compact / reset, drive,
and read-only views (``session``, ``sessions``, ``events``, ``tail``). Delivering never runs
anything: ``drive(sid)`` owns the session and runs it until it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hashlib
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, overload

from eve_cli import _store_migration  # noqa: F401  (registers eve's part of migrations)
from eve_cli._facade import SessionStatus, TurnPolicy
from eve_cli._keys import SESSION_START
from eve_cli._loader import (
    DEFAULT_AGENT_DIR,
    AgentDefinition,
    AgentLoadError,
    check_model_string,
    resolve_agent_dir,
)
from eve_cli._schedules import Schedule, load_schedules
from eve_cli._session import Snapshot, events_stream, history_stream, session_base
from eve_cli._text import bad_text
from eve_cli.execution import SESSION_WORKFLOW, Executor, _receipts
from eve_cli.execution._driver import started_event
from eve_cli.execution._fold import first_message, fresh_start
from eve_cli.execution._fork import ForkPointError, Lineage, fork_session, lineage
from eve_cli.execution._host import read_window, window_messages
from eve_cli.execution._stored_events import EventReader, stored_event
from eve_cli.execution._streams import KeyedStream
from eve_cli.execution._view import TAIL, SessionRow, SessionView, fold, summary
from eve_cli.harness._effects import OUTCOME, answer_problem
from eve_cli.harness._input import compact_message, expand_delivery
from world import (
    Engine,
    NoActiveRunError,
    RunExistsError,
    RunNotFoundError,
    World,
    WorldError,
    default_data_dir,
    is_database_url,
)

__all__ = [
    "AgentLoadError",
    "DeliveryReceipt",
    "ForkPointError",
    "InvalidSessionIdError",
    "Runtime",
    "RuntimeErrorBase",
    "SessionNotFoundError",
    "default_data_dir",
]

# A session id; a sub-agent's session is a child run: <parent run>.<n>[.<n>...]
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[0-9]{1,9})*")
T = TypeVar("T")
_ENDED = ("completed", "failed", "cancelled")
_FIRST_EVENTS = 16  # a session's first message is among its first events


def _same(stored: Any, version: Any) -> bool:
    """A change token kept in a head (msgpack may give a list for a tuple) equals `version`."""
    if isinstance(stored, list) and isinstance(version, tuple):
        stored = tuple(stored)
    return version is not None and bool(stored == version)


class RuntimeErrorBase(Exception):
    """Base of the facade's errors; ``str()`` is one user-facing line."""


class SessionNotFoundError(RuntimeErrorBase, LookupError):
    """No session has this id."""


class InvalidSessionIdError(RuntimeErrorBase, ValueError):
    """The id is malformed (not just unknown)."""


@dataclass(frozen=True)
class DeliveryReceipt:
    """What happened to a delivered message: ``started`` (a new turn), ``steered`` (folded
    into the running turn), ``queued`` (held for the next turn) or ``rejected`` (+ reason)."""

    session_id: str
    disposition: Literal["started", "steered", "queued", "rejected", "accepted"]
    reason: str | None = None


def _accepted(sid: str, sent: str | int) -> DeliveryReceipt:
    """The receipt of a delivery that is not a message (`Runtime._send`'s result)."""
    if isinstance(sent, str):
        return DeliveryReceipt(sid, "rejected", sent)
    return DeliveryReceipt(sid, "accepted")


def open_world(data_dir: Path | str, *, create: bool = True, check: bool = True) -> World:
    """The world stored under ``data_dir``, or the database a ``postgresql://`` URL names
    (``create=False``: a missing one reads as empty; ``check=False``: a data directory whose
    format file is damaged opens too, for ``verify`` and ``repair``)."""
    if isinstance(data_dir, str) and is_database_url(data_dir):
        from world import PostgresWorld

        return PostgresWorld(data_dir, create=create)
    from world import LocalWorld

    world = LocalWorld(data_dir, create=create, check=check)
    if world.migration is not None:  # once in the store's life: said, on stderr, in one line
        print(f"eve: {world.migration}", file=sys.stderr)
    return world


class Runtime:
    """Sessions of one agent folder on one world."""

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
        if model is not None and (problem := check_model_string(model)):
            raise ValueError(problem)
        # A `postgresql://` URL names a database, not a directory.
        url = data_dir if isinstance(data_dir, str) and is_database_url(data_dir) else None
        self.data_dir = Path(data_dir) if data_dir and url is None else default_data_dir()
        self.agent_dir = resolve_agent_dir(agent_dir)
        self.model = model
        self.world = world if world is not None else open_world(url or self.data_dir)
        self.executor = Executor(self.world, self.agent_dir)
        self._views = self.executor.views
        self._metas: dict[str, dict[str, Any]] = {}  # a session's meta never changes
        self._delivery_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._ends: dict[str, _DriveEnd] = {}  # sessions a drive here is driving now
        self.engine.head_note = self._head_note
        self._agent: AgentDefinition | None = None
        if load_agent:
            self._agent = self.executor.agent_for(self._stored_dir(self.agent_dir))

    @property
    def agent(self) -> AgentDefinition:
        """The agent folder's current definition (loaded now by a reader's first use)."""
        if self._agent is None:
            try:
                self._agent = self.executor.agent_for(self._stored_dir(self.agent_dir))
            except AgentLoadError:
                self._agent = self.executor.agent_for(str(DEFAULT_AGENT_DIR))
        return self._agent

    @property
    def engine(self) -> Engine:
        return self.executor.engine

    @staticmethod
    def _stored_dir(directory: Path) -> str | None:
        return None if directory == DEFAULT_AGENT_DIR else str(directory)

    def reload_agent(self) -> AgentDefinition:
        """Reload the agent folder now.

        Turns always use the current definition of their folder (reloaded when its files
        change); a broken edit keeps the last good definition serving. This reports the error.

        Raises:
            AgentLoadError: the folder is broken; the previous definition stays in use.
        """
        self._agent = self.executor.reload(self._stored_dir(self.agent_dir))
        return self._agent

    def agent_error(self) -> str | None:
        """Why the agent folder does not load as it is now (None: it loads); meanwhile the last
        good definition serves. Looks at the files' signatures, loading only if they changed."""
        with contextlib.suppress(AgentLoadError):
            self.executor.agent_for(self._stored_dir(self.agent_dir))
        return self.executor.load_errors.get(str(self.agent_dir))

    # -- sessions -------------------------------------------------------------------------
    async def create_session(
        self,
        mode: str | None = None,
        model: str | None = None,
        operation_id: str | None = None,
        *,
        task: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Create a session durably (it runs when driven); idempotent by ``operation_id``.
        ``task``: its first message, part of its creation (delivered once, whoever creates
        it); ``meta``: more constants kept with it (``engine.info(sid).meta``)."""
        sid, _ = await self._create_session(mode, model, operation_id, task, meta)
        return sid

    async def _create_session(
        self,
        mode: str | None,
        model: str | None,
        operation_id: str | None,
        task: str | None,
        extra: dict[str, Any] | None,
    ) -> tuple[str, bool]:
        """The session's id, and whether this call created it."""
        if model is not None and (problem := check_model_string(model)):
            raise ValueError(problem)
        if (problem := bad_text(task, "the task") or bad_text(extra, "meta")) is not None:
            raise ValueError(problem)  # refused before anything is stored
        mode = mode or self.agent.config.mode
        if mode not in ("conversation", "task"):
            raise ValueError(f"mode must be conversation or task, not {mode!r}")
        if operation_id is not None:
            sid = self._operation_sid(operation_id)
            if await self.call(self._exists, sid):
                await self.call(self._finish_create, sid)
                return sid, False
        else:
            sid = f"s_{secrets.token_hex(12)}"
        token = secrets.token_hex(16)  # 128 random bits: the session's continuation token
        snap = Snapshot(
            id=sid,
            token=token,
            agent_dir=self._stored_dir(self.agent_dir),
            model=model or self.model,
            mode=mode,
            created_at=time.time(),
            task=task,
        )
        # The session's constants, kept once: every snapshot the driver journals leaves them
        # out (session_base).
        meta = {
            "eve": 1,
            "token": token,
            "agentDir": snap.agent_dir,
            "model": snap.model,
            "mode": mode,
            "agent": self.agent.name,
            "created": snap.created_at,
            **(extra or {}),
        }
        data = snap.to_data(session_base(meta))
        # What this process kept of an earlier session of this id (removed by `eve gc`, made
        # again from the same operationId) must not stand for the new one.
        self._metas.pop(sid, None)
        self.executor.forget(sid)
        try:
            await self.engine.start(SESSION_WORKFLOW, data, run_id=sid, meta=meta)
        except RunExistsError:  # another process created it from the same operation id first
            await self.call(self._finish_create, sid)
            return sid, False
        await self.call(self._announce, snap, token)
        return sid, True

    def _announce(self, snap: Snapshot, token: str) -> None:
        """A new session's `session.started` event and its hook claim."""
        # session.started is written now (the driver's own emit of it is then a no-op), so a
        # session is listed from its creation on.
        started = stored_event(
            "session.started", time.time(), started_event(snap, self.agent.name), snap.created_at
        )
        KeyedStream(self.world, events_stream(snap.id), 0).append(SESSION_START, started)
        # Claimed now (the driver claims the same token for the same run id when it first
        # runs), so deliveries are accepted before the session was ever driven.
        self.world.claim_hook(token, snap.id)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Make a call of this facade's that reads or writes the world from an event loop:
        off the loop on a world whose every call is a round trip (`World.io`: the loop goes
        on driving other sessions and serving requests), inline on the others."""
        return await self.engine.off_loop(fn, *args)

    @staticmethod
    def _operation_sid(operation_id: str) -> str:
        return f"s_{hashlib.sha256(operation_id.encode()).hexdigest()[:24]}"

    def operation_session(self, operation_id: str) -> str | None:
        """The id of the session a create with ``operation_id`` made, if it exists."""
        sid = self._operation_sid(operation_id)
        return sid if self._exists(sid) else None

    def ever_delivered(self, sid: str) -> bool:
        """True once anything was delivered to ``sid`` (its inbox was ever written): a create
        retried by its operationId delivers its message only while this is False, so the
        create and its first message are one unit, however the first attempt died."""
        self._meta(sid)
        items, end = self.world.read_inbox(sid.split(".", 1)[0])
        return bool(items) or end > 0

    def _finish_create(self, sid: str) -> None:
        """Do again what a create does after its journal record, in case the process died
        there: the ``session.started`` event and the claim of the continuation token (both
        idempotent). A session that ended keeps its token released."""
        meta = self._meta(sid)
        name = events_stream(sid)
        if self.world.stream_length(name) == 0:
            snap = Snapshot(
                id=sid,
                token=str(meta.get("token")),
                agent_dir=meta.get("agentDir"),
                model=meta.get("model"),
                mode=str(meta.get("mode")),
                created_at=float(meta.get("created") or time.time()),
            )
            agent = str(meta.get("agent") or self.agent.name)
            started = stored_event(
                "session.started", time.time(), started_event(snap, agent), snap.created_at
            )
            KeyedStream(self.world, name, 0).append(SESSION_START, started)
        token = meta.get("token")
        if token and self.world.hook_owner(str(token)) is None and self._status(sid) not in _ENDED:
            self.world.claim_hook(str(token), sid)

    def _exists(self, sid: str) -> bool:
        try:
            self.engine.info(sid)
        except RunNotFoundError:
            return False
        return True

    def _kept_meta(self, sid: str) -> dict[str, Any] | None:
        """The meta kept of session ``sid`` (a copy), not checked against the world; None
        when none is kept."""
        if not isinstance(sid, str) or not _SESSION_ID.fullmatch(sid):
            raise InvalidSessionIdError(
                f"invalid session id {sid!r}: expected 1-64 of A-Z a-z 0-9 _ - "
                "(a sub-agent's session adds .<n> parts)"
            )
        known = self._metas.get(sid)
        return dict(known) if known is not None else None

    def _meta(self, sid: str) -> dict[str, Any]:
        known = self._kept_meta(sid)
        if known is not None and self.world.family_exists(sid.split(".", 1)[0]):
            return dict(known)  # asked several times a turn: one stat, not a head read
        try:
            info = self.engine.info(sid)
        except RunNotFoundError:
            raise SessionNotFoundError(f"no session {sid!r}") from None
        if info.workflow != SESSION_WORKFLOW:
            raise SessionNotFoundError(f"no session {sid!r}")
        if len(self._metas) > 4096:
            self._metas.clear()
        self._metas[sid] = dict(info.meta)
        return dict(info.meta)

    async def _send(
        self, sid: str, payload: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> str | int:
        """Deliver to the session's hook (``meta``: the session's, when just read); returns the
        delivery id, or why it could not be delivered."""
        token = (meta if meta is not None else await self.call(self._meta, sid)).get("token")
        if not token:
            return "this session takes no deliveries"
        try:
            return (await self.engine.deliver(token, payload)).id
        except NoActiveRunError:
            return "the session has ended"

    async def deliver(
        self,
        sid: str,
        message: str,
        turn_policy: TurnPolicy = "steer",
        output_schema: dict[str, Any] | None = None,
    ) -> DeliveryReceipt:
        """Deliver a user message; the receipt says whether it starts, steers or queues.
        ``output_schema``: the JSON schema the answer to the turn it starts follows (a
        ``result`` event; in place of the agent's own)."""
        if turn_policy not in ("steer", "queue"):
            raise ValueError(f"turn_policy must be steer or queue, not {turn_policy!r}")
        if output_schema is not None and not isinstance(output_schema, dict):
            raise ValueError("output_schema must be a JSON schema object")
        if (problem := bad_text(message, "the message")) is not None:
            return DeliveryReceipt(sid, "rejected", problem)  # nothing stored
        # One delivery to a session at a time in this process: what is ahead of a message in
        # the inbox decides its receipt, so two must not both find nothing ahead. Taken before
        # the first wait, so concurrent deliveries keep the order they were made in (a
        # network world's reads return in any order).
        async with self._delivering(sid):
            # The session looked up once: its status, the events' length and its hook's token
            # all come from that one look.
            meta = await self.call(self._meta, sid)
            status, since = await self.call(self._status_at, sid, meta)
            if status in _ENDED:
                return DeliveryReceipt(sid, "rejected", f"the session has {status}")
            payload = compact_message(message, turn_policy, output_schema)
            sent = await self._send(sid, payload, meta)
        if isinstance(sent, str):
            return DeliveryReceipt(sid, "rejected", sent)
        return DeliveryReceipt(sid, await self._disposition(sid, sent, turn_policy, since, meta))

    async def _disposition(
        self, sid: str, delivery: int, policy: str, since: int, meta: dict[str, Any]
    ) -> _receipts.Disposition:
        """Where the message delivered as ``delivery`` goes (`execution._receipts`), read
        from the session's events after the delivery, from the turn under way at ``since``
        (the events' length just before it) on."""
        deadline = time.monotonic() + _receipts.ENDING_WAIT
        while True:
            events = await self.call(self._events_around, sid, since, meta)
            taken = _receipts.taken(events).get(delivery)
            if taken is not None:
                return cast(_receipts.Disposition, taken)
            now = _receipts.phase(events)
            ahead = now == "between" and await self.call(self._ahead, sid, delivery, events)
            answer = _receipts.decide(now, policy, ahead)
            if answer is not None:
                return answer
            if time.monotonic() > deadline:
                return "steered"  # no live drive: the turn's replay polls after this delivery
            await asyncio.sleep(0.01)

    def _events_around(self, sid: str, since: int, meta: dict[str, Any]) -> list[dict[str, Any]]:
        """The session's events from the last phase boundary before ``since`` on (one read,
        unless the turn under way at ``since`` began more than a few events before it)."""
        name = events_stream(sid)
        end = self.world.stream_length(name)
        reader = self._reader(sid, meta)
        first = max(0, since - 16)
        events = reader.read(first, self.world.stream_read(name, first, end), texts=False)
        chunk = 64
        while True:
            starts = [
                n
                for n, e in enumerate(events)
                if e["index"] < since and _receipts.receipt_boundary(e)
            ]
            if starts or first == 0:
                return events[starts[-1] :] if starts else events
            start, first = first, max(0, first - chunk)
            events[:0] = reader.read(first, self.world.stream_read(name, first, start), texts=False)
            chunk *= 4

    def _ahead(self, sid: str, delivery: int, events: list[dict[str, Any]]) -> bool:
        """True when a message delivered to ``sid`` before ``delivery`` was not taken yet, as
        far as its events say (``events`` first, then earlier ones): it starts the next turn.
        The inbox is read from the head's mark (what its last drive had taken)."""
        root = sid.split(".", 1)[0]
        mark = (self.world.read_head(root) or {}).get("inbox_mark")
        mark = mark if isinstance(mark, int) and mark > 0 else 0
        if mark >= delivery:
            return False  # the first delivery since the last drive took what came before
        items, _ = self.world.read_inbox(root, mark)
        earlier = {
            item.id
            for item in items
            if item.id < delivery
            and isinstance(payload := expand_delivery(item.payload), dict)
            and payload.get("kind") == "message"
        }
        earlier -= _receipts.taken(events).keys()
        end = events[0]["index"] if events else 0
        # Taken by an earlier turn than the one read: since the head's mark, so among the
        # latest events (bounded: a message still pending would have it read them all).
        stop = max(0, end - _receipts.TAKEN_SCAN)
        while earlier and end > stop:
            first = max(stop, end - 256)
            earlier -= _receipts.taken(self.events(sid, first, texts=False, end=end)).keys()
            end = first
        return bool(earlier)

    @contextlib.asynccontextmanager
    async def _delivering(self, sid: str) -> AsyncIterator[None]:
        lock, users = self._delivery_locks.get(sid) or (asyncio.Lock(), 0)
        self._delivery_locks[sid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._delivery_locks[sid]
            if users == 1:
                del self._delivery_locks[sid]
            else:
                self._delivery_locks[sid] = (lock, users - 1)

    def _status(self, sid: str) -> str:
        """The session's status folded from its events since the last ``turn.started`` (or
        ``session.started``): a turn starts with nothing pending, so nothing older matters,
        and a delivery to an old session costs what it costs to a new one. A sleeping turn
        (the sleep tool) is ``running`` here: a message wakes it and is folded in."""
        return self._status_at(sid)[0]

    def _status_at(self, sid: str, meta: dict[str, Any] | None = None) -> tuple[str, int]:
        """The session's status (see :meth:`_status`) and the number of events it is of
        (``meta``: the session's, when just read)."""
        name = events_stream(sid)
        end = length = self.world.stream_length(name)
        kept = self._views.fold_at(sid, end)  # a fold of every stored event, kept: no read
        if kept is not None:
            return _live_status(kept.view), length
        reader = self._reader(sid, meta)
        tail: list[dict[str, Any]] = []
        chunk = 16
        while end > 0:
            start = max(0, end - chunk)
            tail[:0] = reader.read(start, self.world.stream_read(name, start, end), texts=False)
            for i in range(len(tail) - 1, -1, -1):
                if fresh_start(tail[i]):
                    return _live_status(fold(sid, tail[i:])), length
            end, chunk = start, chunk * 4
        return _live_status(fold(sid, tail)), length

    async def respond(self, sid: str, responses: list[dict[str, Any]]) -> DeliveryReceipt:
        """Answer pending input requests (approvals: ``approved``/``always``; questions:
        ``answer``; an interrupted call's outcome: ``outcome`` rerun|failed|result, with
        ``result``). An answer to a request that is not pending in this session, or of the
        wrong shape, is rejected before anything is written."""
        problem = bad_text(responses, "responses") or await self.call(
            self._check_responses, sid, responses
        )
        if problem:
            return DeliveryReceipt(sid, "rejected", problem)
        sent = await self._send(sid, {"kind": "responses", "responses": list(responses)})
        return _accepted(sid, sent)

    def _check_responses(self, sid: str, responses: Any) -> str | None:
        if not isinstance(responses, list) or not responses:
            return "responses must be a non-empty list"
        pending = {p.get("requestId"): p for p in self.session(sid)["pending"]}
        for response in responses:
            rid = response.get("requestId") if isinstance(response, dict) else None
            if not isinstance(rid, str):
                return "each response needs a requestId (a string)"
            request = pending.get(rid)
            if request is None:
                return f"request {rid!r} is not pending in session {sid}"
            if request.get("kind") == "question":
                if not isinstance(response.get("answer"), str):
                    return f"request {rid!r} is a question: answer it with a string"
            elif request.get("kind") == OUTCOME:
                if (problem := answer_problem(response)) is not None:
                    return f"request {rid!r} asks what became of an interrupted call: {problem}"
            elif not isinstance(response.get("approved"), bool):
                return f"request {rid!r} needs approved: true or false"
        return None

    async def _operation(self, sid: str, kind: str) -> DeliveryReceipt:
        return _accepted(sid, await self._send(sid, {"kind": kind}))

    async def cancel(self, sid: str) -> DeliveryReceipt:
        """Cancel the running turn (it ends with ``turn.cancelled``): durably, at the next
        action boundary of whichever process drives the session; a model call this process
        is streaming for it stops now."""
        stored = self.executor.cancels.storing(sid)  # the next action boundary waits for it
        try:
            receipt = await self._operation(sid, "cancel")
        finally:
            stored()
        if receipt.disposition == "accepted":
            self.executor.cancels.fire(sid)
        return receipt

    async def clear(self, sid: str) -> DeliveryReceipt:
        """Wipe the model history; identity and state stay."""
        return await self._operation(sid, "clear")

    async def compact(self, sid: str) -> DeliveryReceipt:
        """Summarise the history now."""
        return await self._operation(sid, "compact")

    async def reset(self, sid: str) -> DeliveryReceipt:
        """Wipe history and state; the session id stays."""
        return await self._operation(sid, "reset")

    async def fork(self, sid: str, at: str | None = None) -> dict[str, Any]:
        """A new session whose history and state are ``sid``'s as of checkpoint ``at``
        (``T``: after turn T; ``T.S``: after step S of turn T; None: the latest), recorded
        as its fork; ``sid`` is only read (another process may drive it). Returns
        ``{"sessionId", "forkedFrom", "checkpoint"}``; `ForkPointError` (a LookupError) when
        there is no such checkpoint, ValueError for a malformed ``at``."""
        meta = await self.call(self._meta, sid)
        if "." in sid:
            raise ValueError(f"{sid} is a sub-agent's session: fork the session it serves")
        events = await self.call(functools.partial(self.events, sid, texts=False))
        return await fork_session(self.engine, sid, events, meta, at)

    def stored_model(self, sid: str) -> str | None:
        """The model string the session was started with (``-m``); None: its agent's own."""
        model = self._meta(sid).get("model")
        return str(model) if model else None

    def lineage(self, sid: str) -> Lineage:
        """``{"forkedFrom": {"session", "checkpoint", "at"} | None, "forks": [ids]}``: where
        ``sid`` was forked from, and the sessions forked from it (reads its fork list and each
        fork's meta, not every head)."""
        return lineage(self.world, sid, self._meta(sid), self._meta_or_none)

    def _meta_or_none(self, sid: str) -> dict[str, Any] | None:
        try:
            return self._meta(sid)
        except (WorldError, RuntimeErrorBase):  # not (or no longer) a session
            return None

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
        # A session seen before is not looked up again: the engine's run finds out whether
        # its family is still there (one round trip, not two), and the meta is the one the
        # view needs (a session's meta never changes).
        meta = self._kept_meta(sid)
        if meta is None:
            meta = await self.call(self._meta, sid)
        # What the drive returns is made where its last head is written, under its lease
        # (see _head_note): not in a round trip of its own after it.
        end = _DriveEnd(meta, view) if "." not in sid and sid not in self._ends else None
        if end is not None:
            self._ends[sid] = end
        try:
            await self.engine.run(sid, wait=wait)
        except RunNotFoundError:
            self._metas.pop(sid, None)  # removed since (`eve gc`)
            self._views.forget(sid)
            raise SessionNotFoundError(f"no session {sid!r}") from None
        except BaseException:
            self._views.forget(sid)  # it may have taken events that were not stored
            raise
        finally:
            if end is not None:
                del self._ends[sid]
        if end is not None and end.result is not None:
            return end.result
        if not view:
            return {"id": sid, "status": await self.call(self._status, sid)}
        return await self.call(self._session, sid, meta)

    async def wait(self, sid: str, timeout: float) -> bool:
        """Wait, holding no lock, until the session has a delivery (from any process) or a due
        timer; False on timeout."""
        await self.call(self._meta, sid)
        return await self.engine.wait(sid, timeout)

    # -- schedules (SPEC §16) -----------------------------------------------------------------
    def schedules(self) -> tuple[list[Schedule], list[str]]:
        """The agent folder's schedules, and a ``file:line: what`` line per broken file."""
        return load_schedules(self.agent.directory)

    def _schedule_marks(self) -> list[tuple[dict[str, Any], str]]:
        """``(meta["schedule"], session id)`` of every session a schedule of this agent
        started (from the heads: one call)."""
        found = []
        for info in self.engine.runs():
            mark = info.meta.get("schedule") if info.parent is None else None
            if isinstance(mark, dict) and mark.get("agent") == self.agent.name:
                found.append((mark, info.run_id))
        return found

    def schedule_sessions(self) -> dict[str, list[tuple[float, str]]]:
        """The sessions each schedule of this agent started, by schedule name: ``(tick,
        session id)``, oldest first (a session run by hand counts with the time it was
        asked for)."""
        found: dict[str, list[tuple[float, str]]] = {}
        for mark, sid in self._schedule_marks():
            found.setdefault(str(mark.get("name")), []).append((float(mark.get("tick") or 0), sid))
        return {name: sorted(runs) for name, runs in found.items()}

    def schedule_ticks(self) -> dict[str, float]:
        """The latest tick each schedule of this agent started a session for (runs asked for
        by hand not counted)."""
        latest: dict[str, float] = {}
        for mark, _ in self._schedule_marks():
            if not mark.get("manual"):
                name, tick = str(mark.get("name")), float(mark.get("tick") or 0.0)
                latest[name] = max(tick, latest.get(name, tick))
        return latest

    async def run_schedule(self, schedule: Schedule, tick: float) -> tuple[str, bool]:
        """The session of ``schedule``'s ``tick``, started unless it exists; and whether this
        call started it. Its id derives from the agent, the schedule and the tick, and its
        first message is part of its creation: one session per tick, however many processes
        (restarts, workers) try."""
        operation = f"schedule:{self.agent.name}:{schedule.name}:{tick:.3f}"
        mark = {"agent": self.agent.name, "name": schedule.name, "tick": tick}
        return await self._create_session(
            schedule.mode, None, operation, schedule.message, {"schedule": mark}
        )

    async def run_schedule_now(self, name: str) -> str:
        """Start a session of schedule ``name`` now (by hand: not a tick); its id.
        `LookupError` when the agent has no such schedule."""
        found = {s.name: s for s in self.schedules()[0]}
        if name not in found:
            known = ", ".join(sorted(found)) or "none"
            raise LookupError(f"no schedule {name!r} in {self.agent.directory} (known: {known})")
        schedule, now = found[name], time.time()
        mark = {"agent": self.agent.name, "name": name, "tick": now, "manual": True}
        sid, _ = await self._create_session(
            schedule.mode, None, None, schedule.message, {"schedule": mark}
        )
        return sid

    def schedule_rows(self) -> tuple[list[dict[str, Any]], list[str]]:
        """What `eve schedules` and `GET /eve/v1/schedules` list: per schedule its file's
        settings, next tick, last run, how many sessions it made and the latest 10 of them;
        and the broken files."""
        schedules, problems = self.schedules()
        made = self.schedule_sessions() if schedules else {}
        now, rows = time.time(), []
        for schedule in schedules:
            runs = made.get(schedule.name, [])
            upcoming = schedule.next_after(now)
            rows.append(
                {
                    "name": schedule.name,
                    "when": schedule.when,
                    "timezone": schedule.timezone,
                    "mode": schedule.mode,
                    "missed": schedule.missed,
                    "next": _iso(upcoming) if upcoming is not None else None,
                    "last": _iso(runs[-1][0]) if runs else None,
                    "lastSession": runs[-1][1] if runs else None,
                    "sessions": len(runs),
                    # The latest ones it made (all of them: `sessions`).
                    "made": [{"tick": _iso(t), "sessionId": sid} for t, sid in runs[-10:]],
                    "file": str(schedule.path),
                }
            )
        return rows, problems

    def timers(self, sid: str | None = None) -> dict[str, float]:
        """When each session parked on a timer (a sleeping turn) is due, by session id
        (seconds since the epoch): every session's (one read of the heads), or ``sid``'s."""
        due: dict[str, float] = {}
        for run_id, when in self.engine.timers(sid):
            root = run_id.split(".", 1)[0]
            due[root] = min(when, due.get(root, when))
        return due

    def timers_version(self) -> Hashable:
        """A token that changes when any process puts a session to sleep on this world (None:
        the world cannot tell); what :meth:`wait_timers` compares."""
        return self.world.timers_version()

    def timers_since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        """The version now, and the sessions put to sleep since ``version`` (None: the world
        cannot say which; read every timer)."""
        return self.world.timers_since(version)

    async def wait_timers(self, version: Hashable, timeout: float) -> bool:
        """Wait until :meth:`timers_version` differs from ``version`` (a session was put to
        sleep here or by another process); False on timeout."""
        return await self.world.wait_timers(version, timeout)

    def resumable(self) -> list[str]:
        """Sessions with work to do now (interrupted, or with undelivered input)."""
        found = []
        for run_id in self.engine.runnable():
            root = run_id.split(".", 1)[0]
            if root not in found:
                found.append(root)
        return found

    # -- reading ----------------------------------------------------------------------------
    def session(self, sid: str) -> SessionView:
        """The session's view: status, turns with steps and actions, pending requests."""
        return self._session(sid, self._meta(sid))

    def _session(self, sid: str, meta: dict[str, Any], length: int | None = None) -> SessionView:
        """The view of ``sid``, whose meta is ``meta`` (``length``: its events' number, when
        it is known)."""
        name = events_stream(sid)
        reader = EventReader(self.world, sid, lambda: meta)

        def read(start: int) -> list[dict[str, Any]]:
            if length is not None and start >= length:
                return []
            return reader.read(start, self.world.stream_read(name, start))

        # Fed only the events appended since the last read, unless the stored ones changed.
        view = self._views.view(sid, name, read)
        if view["events"] == 0:  # a session has session.started: one removed just now raises
            self._meta(sid)
        view["agent"] = view["agent"] or meta.get("agent")
        view["mode"] = view["mode"] or meta.get("mode")
        view["model"] = meta.get("model") or self.agent.model
        view["agentDir"] = meta.get("agentDir")
        return view

    def sessions(self) -> list[dict[str, Any]]:
        """One row per session, most recently active first (reads only each stream's tail);
        each a `SessionRow`, open to what a caller adds (a listing's live status, a title)."""
        with _collector_paused():
            return self._sessions()

    def _sessions(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        forks: dict[str, list[str]] = {}
        # One call for every session (no inbox marks: a row needs none), one for their streams.
        heads = self.world.heads(inbox=False)
        versions = self.world.stream_versions([events_stream(h.root) for h in heads])
        for family, version in zip(heads, versions, strict=True):
            sid, head = family.root, family.head
            note = head.get("note") if head else None
            row: SessionRow | None
            if isinstance(note, dict) and _same(note.get("events"), version):
                row = cast(SessionRow, dict(note["row"]))  # nothing appended since the head
                row["bytes"] = note.get("bytes")
            else:
                row = self._row(sid)
            if row is not None:
                rows.append(cast("dict[str, Any]", row))
                origin = row.get("forkedFrom")
                if isinstance(origin, dict):  # lineage, both ways, from the rows alone
                    forks.setdefault(str(origin.get("session")), []).append(sid)
        for listed in rows:
            if listed["id"] in forks:
                listed["forks"] = sorted(forks[listed["id"]])
        rows.sort(key=lambda r: r["updatedAt"] or "", reverse=True)
        return rows

    def _row(self, sid: str) -> SessionRow | None:
        """The ``sessions()`` row of ``sid`` from its stream's tail; None if not a session."""
        tail = self.events(sid, -TAIL, texts=False)  # a row shows no message text
        if not tail or tail[0].get("sessionId") != sid:
            return None  # not an eve session
        if tail[0]["index"] > 0 and not any("turns" in event for event in tail):
            tail = self.events(sid)  # written before events carried counts: read it whole
        row = summary(sid, tail)
        if row["agent"] is None:  # session.started is older than the tail
            row["agent"] = self._agent_name(sid)
        # The first message is among the first events (session.started, turn.started, …).
        row["first"] = first_message(fold(sid, self.events(sid, 0, end=_FIRST_EVENTS)))
        self._add_origin(row, sid)
        row["bytes"] = self._bytes(sid)
        return row

    def _head_note(self, root: str) -> dict[str, Any] | None:
        """Kept in the session's head by the engine each time it writes it (end of a drive,
        creation): the listing row, valid while the event stream keeps that length."""
        count = self._event_count(root)  # before reading: an append in between shows as stale
        # The kept view's fold, when it has every stored event: the tail needs no reading.
        kept = self._views.fold_at(root, self.world.stream_length(events_stream(root)))
        row = kept.row() if kept is not None else None
        if row is not None and kept is not None:
            row["first"] = first_message(kept.view)  # a kept fold took every event
            row["agent"] = row["agent"] or self._agent_name(root)
            row["bytes"] = self._bytes(root)
            self._add_origin(row, root)
        else:
            row = self._row(root)
        if (end := self._ends.get(root)) is not None:
            self._end_of_drive(root, end)
        if row is None:
            return None
        bytes_ = row.pop("bytes")
        # A tuple is stored as a msgpack extension, decoded by a Python hook on each listing
        # (10,000 heads: 0.1 s); a list decodes natively, and `_same` compares it as a tuple.
        token = list(count) if isinstance(count, tuple) else count
        return {"row": row, "events": token, "bytes": bytes_}

    def _end_of_drive(self, sid: str, end: _DriveEnd) -> None:
        """What the drive of ``sid`` returns, made while its head is written: the family is
        held, so the stored events are those the kept fold took (none to read back) and no
        one else appends more before the head is written. One that cannot be made here is
        made after the drive (as before: an error is raised there)."""
        end.result = None
        try:
            length = self.world.stream_length(events_stream(sid))
            if end.view:
                end.result = self._session(sid, end.meta, length)
            elif (kept := self._views.fold_at(sid, length)) is not None:
                end.result = {"id": sid, "status": _live_status(kept.view)}
        except Exception:
            end.result = None

    def _present_meta(self, sid: str) -> dict[str, Any] | None:
        """The meta of ``sid``, whose family is known to be there (its head is being written,
        or the heads were just read): the kept one, not looked up again; None: not (or no
        longer) a session."""
        try:
            known = self._kept_meta(sid)
            return known if known is not None else self._meta(sid)
        except (WorldError, RuntimeErrorBase):
            return None

    def _add_origin(self, row: SessionRow, sid: str) -> None:
        """A fork's row names where it came from (its meta's ``forkedFrom``)."""
        origin = (self._present_meta(sid) or {}).get("forkedFrom")
        if isinstance(origin, dict):
            row["forkedFrom"] = origin

    def _event_count(self, sid: str) -> Any:
        """What identifies the stored events of ``sid`` (`World.stream_versions`: any append
        or rewrite changes it)."""
        return self.world.stream_versions([events_stream(sid)])[0]

    def _agent_name(self, sid: str) -> str | None:
        name = (self._present_meta(sid) or {}).get("agent")  # no head read: it is being written
        return str(name) if name else None

    def history(self, sid: str) -> list[dict[str, Any]]:
        """The messages the model would see at the session's next turn (summary first).

        Read from the snapshot the last finished turn left; reads the session's journal, so it
        is meant for inspection and tests, not hot paths.
        """
        self._meta(sid)
        data = None
        for record in self.engine.history(sid):
            if record.get("t") in ("start", "gen"):
                data = record.get("input")
        if data is None:
            return []
        snap = Snapshot.from_data(data, sid, session_base(self._meta(sid)))
        messages, _, summary_text = read_window(self.world, snap)
        return window_messages(messages, summary_text)

    def _bytes(self, sid: str) -> int:
        """Bytes a session stores (journal, inbox, head, its event and history streams)."""
        streams = (events_stream(sid), history_stream(sid))
        return self.world.family_usage(sid, streams=streams).bytes

    def events(
        self, sid: str, start: int = 0, *, texts: bool = True, end: int | None = None
    ) -> list[dict[str, Any]]:
        """Stored events from ``start`` (negative counts back from the tail) to ``end`` (not
        included; default: all), with indexes (``texts=False``: message texts left empty,
        which spares reading them)."""
        name = events_stream(sid)
        length = self.world.stream_length(name)
        first = max(0, length + start) if start < 0 else start
        items = self.world.stream_read(name, first, length if end is None else min(end, length))
        return self._reader(sid).read(first, items, texts=texts)

    def _reader(self, sid: str, meta: dict[str, Any] | None = None) -> EventReader:
        """The session's event reader (stored events leave out what the run's meta has: the
        continuation token, the creation time their ``at`` counts from; ``meta``: the
        session's, when just read)."""
        return EventReader(
            self.world, sid, (lambda: meta) if meta is not None else (lambda: self._meta(sid))
        )

    async def tail(self, sid: str, start: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Stored events from ``start``, then live ones as they are appended (any process)."""
        await self.call(self._meta, sid)
        name = events_stream(sid)
        if start < 0:
            start = max(0, await self.call(self.world.stream_length, name) + start)
        reader = self._reader(sid)
        async for index, item in self.world.stream_tail(name, start):
            # The texts of the events that refer to history items: read where reads wait.
            while not (events := await self.call(reader.read, index, [item])):
                await asyncio.sleep(0.02)  # its text is being stored (see EventReader.read)
            yield events[0]

    def close(self) -> None:
        self.executor.close()
        self.world.close()


@dataclass
class _DriveEnd:
    """What a drive of a session returns (``result``: its view if ``view``, else its status),
    made by the last head write of the drive (`Runtime._end_of_drive`)."""

    meta: dict[str, Any]
    view: bool
    result: SessionView | SessionStatus | None = None


def _live_status(view: SessionView) -> str:
    """A view's status as a delivery sees it: a sleeping turn takes messages as a running one."""
    return "running" if view.get("parkedOn") == "sleep" else str(view["status"])


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a listing builds its rows: 10,000 sessions'
    heads and rows (dicts, no cycles) made it run full collections over them again and again
    (a listing of 10,000: ~0.75 -> ~0.5 s)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
