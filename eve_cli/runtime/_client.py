"""What a caller of sessions does: create, deliver, respond, cancel / clear / compact / reset,
fork. Nothing here runs a session: a delivery is written to its inbox and whichever process
drives the session takes it (`eve_cli.runtime._worker`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from eve_cli._events import Event
from eve_cli._facade import By, JsonSchema, TurnPolicy
from eve_cli._keys import SESSION_START
from eve_cli._loader import AgentLoadError, check_model_string
from eve_cli._session import Delivered, SessionMeta, Snapshot, events_stream, session_base
from eve_cli._text import bad_text
from eve_cli.execution import (
    ENDING_WAIT,
    SESSION_WORKFLOW,
    TAKEN_SCAN,
    Disposition,
    Forked,
    KeyedStream,
    decide,
    fork_session,
    phase,
    receipt_boundary,
    started_event,
    stored_event,
    taken,
)
from eve_cli.runtime._core import ENDED, Core
from eve_cli.runtime._reader import Reader
from world import NoActiveRunError, OwnershipError, RunExistsError

# The harness (and the models and tools behind it) is imported by the calls that use it: a
# command that only reads sessions does without it.

__all__ = ["Client", "DeliveryReceipt"]


@dataclass(frozen=True)
class DeliveryReceipt:
    """What happened to a delivered message: ``started`` (a new turn), ``steered`` (folded
    into the running turn), ``queued`` (held for the next turn) or ``rejected`` (+ reason)."""

    session_id: str
    disposition: Literal["started", "steered", "queued", "rejected", "accepted"]
    reason: str | None = None


_TASK_QUEUE = "a task session runs one turn: steer the message into it, or start a new session"


def _accepted(sid: str, sent: str | int) -> DeliveryReceipt:
    """The receipt of a delivery that is not a message (`Client._send`'s result)."""
    if isinstance(sent, str):
        return DeliveryReceipt(sid, "rejected", sent)
    return DeliveryReceipt(sid, "accepted")


def _signed(payload: Mapping[str, Any], by: By | None) -> dict[str, object]:
    """A delivery's payload with who sent it (``b``; SPEC §18), when known."""
    return {**payload, "b": dict(by)} if by else dict(payload)


def operation_sid(operation_id: str) -> str:
    """The id of the session a create with ``operation_id`` makes."""
    return f"s_{hashlib.sha256(operation_id.encode()).hexdigest()[:24]}"


class Client:
    """The calls that change sessions, none of which runs one."""

    def __init__(self, core: Core, reader: Reader) -> None:
        self.core = core
        self.reader = reader
        self.world = core.world
        self._delivery_locks: dict[str, tuple[asyncio.Lock, int]] = {}

    # -- creating -------------------------------------------------------------------------
    async def create_session(
        self,
        mode: str | None,
        model: str | None,
        operation_id: str | None,
        task: str | None,
        extra: Mapping[str, Any] | None,
        first: Delivered | None = None,
    ) -> tuple[str, bool]:
        """The session's id, and whether this call created it. ``first``: a message the
        session takes first (queued in its creation record; the meta says it has one)."""
        core = self.core
        if model is not None and (problem := check_model_string(model)):
            raise ValueError(problem)
        if (problem := bad_text(task, "the task") or bad_text(extra, "meta")) is not None:
            raise ValueError(problem)  # refused before anything is stored
        mode = mode or core.agent.config.mode
        if mode not in ("conversation", "task"):
            raise ValueError(f"mode must be conversation or task, not {mode!r}")
        if operation_id is not None:
            sid = operation_sid(operation_id)
            if await core.call(core.exists, sid):
                await core.call(self.finish_create, sid)
                return sid, False
        else:
            sid = f"s_{secrets.token_hex(12)}"
        token = secrets.token_hex(16)  # 128 random bits: the session's continuation token
        snap = Snapshot(
            id=sid,
            token=token,
            agent_dir=core.stored_dir(core.agent_dir),
            agent_name=core.agent.name,
            model=model or core.model,
            mode=mode,
            created_at=time.time(),
            task=task,
            queued=[first.copy()] if first is not None else [],
        )
        # The session's constants, kept once: every snapshot the driver journals leaves them
        # out (session_base).
        meta = {
            "eve": 1,
            "token": token,
            "agentDir": snap.agent_dir,
            "model": snap.model,
            "mode": mode,
            "agent": core.agent.name,
            "created": snap.created_at,
            **(extra or {}),
        }
        if first is not None:
            meta["first"] = True
        data = snap.to_data(session_base(meta))
        # What this process kept of an earlier session of this id (removed by `eve gc`, made
        # again from the same operationId) must not stand for the new one.
        core.forget_meta(sid)
        core.executor.forget(sid)
        try:
            await core.engine.start(SESSION_WORKFLOW, data, run_id=sid, meta=meta)
        except RunExistsError:  # another process created it from the same operation id first
            await core.call(self.finish_create, sid)
            return sid, False
        await core.call(self._announce, snap, token)
        return sid, True

    async def start_session(
        self,
        message: str | None,
        operation_id: str | None,
        mode: str | None,
        output_schema: JsonSchema | None,
        meta: Mapping[str, Any] | None = None,
        by: By | None = None,
        turn_policy: TurnPolicy = "steer",
    ) -> tuple[str, bool, DeliveryReceipt | None]:
        """A session created with its first message (if any, sent ``by``) in its creation
        record; ``meta``: more constants kept with it (its ``owner``). The message's receipt:
        ``started`` when this call created the session; when an earlier create of the same
        ``operation_id`` made it without a message, the message is delivered now (with
        ``turn_policy``); None when there is no message or the session already had one."""
        if output_schema is not None and not isinstance(output_schema, dict):
            raise ValueError("output_schema must be a JSON schema object")
        if (problem := bad_text(message, "the message")) is not None:
            raise ValueError(problem)  # refused before anything is stored
        from eve_cli.harness import compact_message, expand_delivery

        first = None
        if message is not None:
            first = expand_delivery(_signed(compact_message(message, "steer", output_schema), by))
        sid, created = await self.create_session(mode, None, operation_id, None, meta, first)
        if message is None:
            return sid, created, None
        if created:
            return sid, created, DeliveryReceipt(sid, "started")
        if await self.core.call(self.ever_delivered, sid):
            return sid, created, None
        return sid, created, await self.deliver(sid, message, turn_policy, output_schema, by)

    def _announce(self, snap: Snapshot, token: str) -> None:
        """A new session's `session.started` event and its hook claim."""
        # session.started is written now (the driver's own emit of it is then a no-op), so a
        # session is listed from its creation on.
        self._append_started(snap, self.core.agent.name)
        # Claimed now (the driver claims the same token for the same run id when it first
        # runs), so deliveries are accepted before the session was ever driven.
        self.world.set_hook(token, snap.id)

    def _append_started(self, snap: Snapshot, agent: str) -> None:
        started = stored_event(
            "session.started", time.time(), started_event(snap, agent), snap.created_at
        )
        # Unless a worker already drives it: that worker's driver writes it (a keyed no-op
        # when it is there), and an append made beside an owner is refused by the world
        # rather than collide with the owner's own.
        with contextlib.suppress(OwnershipError):
            KeyedStream(self.world, events_stream(snap.id), 0).append(SESSION_START, started)

    def finish_create(self, sid: str) -> None:
        """Do again what a create does after its journal record, in case the process died
        there: the ``session.started`` event and the claim of the continuation token (both
        idempotent). A session that ended keeps its token released."""
        meta = self.core.meta(sid)
        if self.world.stream_length(events_stream(sid)) == 0:
            snap = Snapshot(
                id=sid,
                token=str(meta.get("token")),
                agent_dir=meta.get("agentDir"),
                model=meta.get("model"),
                mode=str(meta.get("mode")),
                created_at=float(meta.get("created") or time.time()),
            )
            self._append_started(snap, str(meta.get("agent") or self.core.agent.name))
        token = meta.get("token")
        if (
            token
            and self.world.hook_owner(str(token)) is None
            and self.reader.status(sid) not in ENDED
        ):
            self.world.set_hook(str(token), sid)

    def operation_session(self, operation_id: str) -> str | None:
        sid = operation_sid(operation_id)
        return sid if self.core.exists(sid) else None

    def ever_delivered(self, sid: str) -> bool:
        if self.core.meta(sid).get("first"):
            return True
        items, end = self.world.read_inbox(sid.split(".", 1)[0])
        return bool(items) or end > 0

    # -- delivering -----------------------------------------------------------------------
    def _agent_problem(self, sid: str, session: Snapshot) -> str | None:
        """Why this process cannot run the agent of session ``sid`` (None: it can)."""
        try:
            self.core.executor.session_agent(session)
        except AgentLoadError as exc:
            here = self.core.agent.name
            move = f", or move it: eve session move {sid} --agent {here}"
            return f"its agent cannot run here: {exc}{move if here != session.agent_name else ''}"
        return None

    async def _send(
        self, sid: str, payload: dict[str, Any], meta: SessionMeta | None = None
    ) -> str | int:
        """Deliver to the session's hook (``meta``: the session's, when just read); returns the
        delivery id, or why it could not be delivered."""
        token = (meta if meta is not None else await self.core.call(self.core.meta, sid)).get(
            "token"
        )
        if not token:
            return "this session takes no deliveries"
        try:
            return (await self.core.engine.deliver(token, payload)).id
        except NoActiveRunError:
            return "the session has ended"

    async def deliver(
        self,
        sid: str,
        message: str,
        turn_policy: TurnPolicy = "steer",
        output_schema: JsonSchema | None = None,
        by: By | None = None,
    ) -> DeliveryReceipt:
        if turn_policy not in ("steer", "queue"):
            raise ValueError(f"turn_policy must be steer or queue, not {turn_policy!r}")
        if output_schema is not None and not isinstance(output_schema, dict):
            raise ValueError("output_schema must be a JSON schema object")
        if (problem := bad_text(message, "the message")) is not None:
            return DeliveryReceipt(sid, "rejected", problem)  # nothing stored
        call = self.core.call
        # One delivery to a session at a time in this process: what is ahead of a message in
        # the inbox decides its receipt, so two must not both find nothing ahead. Taken before
        # the first wait, so concurrent deliveries keep the order they were made in (a
        # network world's reads return in any order).
        async with self._delivering(sid):
            # The session looked up once: its status, the events' length and its hook's token
            # all come from that one look.
            meta = await call(self.core.meta, sid)
            status, since, agent = await call(self.reader.status_at, sid, meta)
            if status in ENDED:
                return DeliveryReceipt(sid, "rejected", f"the session has {status}")
            if (problem := self._agent_problem(sid, session_base(meta, agent))) is not None:
                return DeliveryReceipt(sid, "rejected", problem)  # not a turn that fails later
            if turn_policy == "queue" and meta.get("mode") == "task":
                # A task runs one turn: a message held for the next would never be taken.
                return DeliveryReceipt(sid, "rejected", _TASK_QUEUE)
            from eve_cli.harness import compact_message

            payload = _signed(compact_message(message, turn_policy, output_schema), by)
            sent = await self._send(sid, payload, meta)
        if isinstance(sent, str):
            return DeliveryReceipt(sid, "rejected", sent)
        went = await self._disposition(sid, sent, turn_policy, since, meta)
        if went == "rejected":  # stored, but the session ended without taking it
            return DeliveryReceipt(sid, went, "the session ended before taking the message")
        return DeliveryReceipt(sid, went)

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

    # -- a delivered message's receipt ----------------------------------------------------
    async def _disposition(
        self, sid: str, delivery: int, policy: str, since: int, meta: SessionMeta
    ) -> Disposition:
        """Where the message delivered as ``delivery`` goes (`execution._receipts`), read
        from the session's events after the delivery, from the turn under way at ``since``
        (the events' length just before it) on: what a turn recorded when it took it
        (``message.received``, ``message.queued``), else what the phase the session is in
        decides; while a turn may be at its final poll, its next event, waited for (the
        world tells of an append: no polling)."""
        call = self.core.call
        deadline = time.monotonic() + ENDING_WAIT
        while True:
            events = await call(self._events_around, sid, since, meta)
            found = taken(events).get(delivery)
            if found is not None:
                return cast(Disposition, found)
            now = phase(events, task=meta.get("mode") == "task")
            ahead = now == "between" and await call(self._ahead, sid, delivery, events)
            answer = decide(now, policy, ahead)
            if answer is not None:
                return answer
            left = deadline - time.monotonic()
            if left <= 0:
                return "steered"  # no live drive: the turn's replay polls after this delivery
            await self._next_event(sid, events[-1]["index"] + 1 if events else since, left)

    async def _next_event(self, sid: str, after: int, timeout: float) -> None:
        """Return once ``sid`` has more than ``after`` events, or ``timeout`` seconds on."""
        # Every world's tail is an async generator (closed here, not left to the collector).
        tail = cast("AsyncGenerator[Any, None]", self.world.stream_tail(events_stream(sid), after))
        try:
            async with asyncio.timeout(timeout):  # (a cancel goes through, as it may not with
                await anext(tail)  # 3.11's `wait_for`)
        except TimeoutError:
            pass
        finally:
            await tail.aclose()

    def _events_around(self, sid: str, since: int, meta: SessionMeta) -> list[Event]:
        """The session's events from the last phase boundary before ``since`` on (one read
        when the session was between turns or waiting at ``since``: its last event is one;
        more, growing, back to where the turn under way then began)."""
        name = events_stream(sid)
        end = self.world.stream_length(name)
        reader = self.core.reader(sid, meta)
        first = max(0, since - 1)
        events = reader.read(first, self.world.stream_read(name, first, end), texts=False)
        chunk = 16
        while True:
            starts = [n for n, e in enumerate(events) if e["index"] < since and receipt_boundary(e)]
            if starts or first == 0:
                return events[starts[-1] :] if starts else events
            start, first = first, max(0, first - chunk)
            events[:0] = reader.read(first, self.world.stream_read(name, first, start), texts=False)
            chunk *= 4

    def _ahead(self, sid: str, delivery: int, events: list[Event]) -> bool:
        """True when a message delivered to ``sid`` before ``delivery`` was not taken yet, as
        far as its events say (``events`` first, then earlier ones): it starts the next turn.
        The inbox is read from the head's mark (what its last drive had taken)."""
        from eve_cli.harness import expand_delivery

        root = sid.split(".", 1)[0]
        found = self.world.heads(roots=[root], inbox=False)
        mark = max(found[0].inbox_read, 0) if found else 0
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
        earlier -= taken(events).keys()
        end = events[0]["index"] if events else 0
        # Taken by an earlier turn than the one read: since the head's mark, so among the
        # latest events (bounded: a message still pending would have it read them all).
        stop = max(0, end - TAKEN_SCAN)
        while earlier and end > stop:
            first = max(stop, end - 256)
            earlier -= taken(self.reader.events(sid, first, texts=False, end=end)).keys()
            end = first
        return bool(earlier)

    # -- answers and operations -----------------------------------------------------------
    async def respond(
        self, sid: str, responses: Sequence[Mapping[str, Any]], by: By | None = None
    ) -> DeliveryReceipt:
        problem = bad_text(responses, "responses") or await self.core.call(
            self._check_responses, sid, responses
        )
        if problem:
            return DeliveryReceipt(sid, "rejected", problem)
        payload = {"kind": "responses", "responses": list(responses)}
        sent = await self._send(sid, _signed(payload, by))
        return _accepted(sid, sent)

    def _check_responses(self, sid: str, responses: Any) -> str | None:
        if not isinstance(responses, list) or not responses:
            return "responses must be a non-empty list"
        return _responses_problem(sid, self.reader.session(sid)["pending"], responses)

    async def move(
        self, sid: str, agent: str, agent_dir: str | None, by: By | None = None
    ) -> DeliveryReceipt:
        """Deliver the move of session ``sid`` to agent ``agent`` (served from ``agent_dir``
        when no folder of that name is served), which its driver applies between turns."""
        if "." in sid:
            raise ValueError(f"{sid} is a sub-agent's session: move the session it serves")
        meta = await self.core.call(self.core.meta, sid)
        status = (await self.core.call(self.reader.status_at, sid, meta))[0]
        if status in ENDED:
            return DeliveryReceipt(sid, "rejected", f"the session has {status}")
        if status != "waiting":
            return DeliveryReceipt(sid, "rejected", f"it has a turn under way ({status}): "
                                   "answer or cancel it first, then move it")  # fmt: skip
        move = {"kind": "move", "agent": agent, "agentDir": agent_dir}
        return _accepted(sid, await self._send(sid, _signed(move, by), meta))

    async def operation(self, sid: str, kind: str, by: By | None = None) -> DeliveryReceipt:
        """Deliver operation ``kind`` (clear, compact, reset, cancel) to the session."""
        return _accepted(sid, await self._send(sid, _signed({"kind": kind}, by)))

    async def cancel(self, sid: str, by: By | None = None) -> DeliveryReceipt:
        cancels = self.core.executor.cancels
        stored = cancels.storing(sid)  # the next action boundary waits for it
        try:
            receipt = await self.operation(sid, "cancel", by)
        finally:
            stored()
        if receipt.disposition == "accepted":
            cancels.fire(sid)
        return receipt

    async def fork(self, sid: str, at: str | None = None, by: By | None = None) -> Forked:
        meta = await self.core.call(self.core.meta, sid)
        if "." in sid:
            raise ValueError(f"{sid} is a sub-agent's session: fork the session it serves")
        events = await self.core.call(functools.partial(self.reader.events, sid, texts=False))
        if by is not None:  # the fork is its maker's, and says who made it
            meta = {**meta, "owner": by}
        return await fork_session(self.core.engine, sid, events, meta, at, by)


def _responses_problem(
    sid: str, pending_requests: Sequence[Any], responses: list[Any]
) -> str | None:
    """What is wrong with ``responses`` to the session's pending requests, if anything."""
    from eve_cli.harness import OUTCOME, answer_problem

    pending = {p.get("requestId"): p for p in pending_requests}
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
