"""The agent as a service for MCP clients: the five tools' logic on top of the runtime facade
and a :class:`~eve_cli.channel._supervisor.Supervisor` that drives sessions in the
background (no SDK here: ``_serve`` puts it on the wire).

A session is durable and a connection is not: every answer names the session, and a client
that comes back with that id (or starts again with the same ``key``) finds everything there.
Answers are plain data: ``sessionId``, ``status`` (SPEC §9 words), ``parkedOn``, ``pending``
(the requests ``agent_respond`` answers), ``reply`` (the current turn's reply, None while it has
none yet) and ``turn`` (that turn: ``id``, ``number``, ``status``), ``events`` since
the asked index (§8 events, at most :data:`MAX_EVENTS`), ``next`` (the index to ask from next).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from eve_cli._events import Event
from eve_cli._facade import Receipt, ReceiptBody, ServingFacade, TurnPolicy
from eve_cli._json import JSONObject
from eve_cli._session import InputResponse
from eve_cli.auth import APPROVE, LOCAL, READ, SEND, Principal
from eve_cli.channel import NotOwned, Owners, Supervisor, answer_scope
from eve_cli.execution import SessionView
from eve_cli.runtime import InvalidSessionIdError, SessionNotFoundError

MAX_EVENTS = 200  # events in one answer; `next` says where the rest begins
MAX_WAIT = 300.0  # seconds one call may wait for a session
Progress = Callable[[int, str], Awaitable[None]]  # (count, what happened)


class TurnRef(TypedDict):
    """The turn an answer's ``reply`` belongs to."""

    id: str | None
    number: int
    status: str


class CurrentReply(TypedDict):
    """The current turn's reply (None while it has none) and that turn (None before any)."""

    reply: str | None
    turn: TurnRef | None


class State(CurrentReply):
    """A session as every answer gives it (``agent_get``'s whole answer)."""

    sessionId: str
    status: str
    pending: list[JSONObject]  # the view's pending requests
    turnCount: int | None
    events: list[Event]  # from the asked index, at most MAX_EVENTS
    next: int  # the index to ask from next
    parkedOn: NotRequired[str | None]
    more: NotRequired[bool]  # events after ``next`` were left out


class Started(State):
    """``agent_start``'s answer when another call already delivered the message: whether the
    session was made by this call."""

    created: bool


class StartedAndSent(Started, ReceiptBody):
    """``agent_start``'s answer, with what happened to its message."""


class Sent(State, ReceiptBody):
    """``agent_send``'s answer."""


class Answered(State):
    """``agent_respond``'s answer: how many answers it took."""

    accepted: int


class Cancelled(State):
    """``agent_cancel``'s answer."""

    cancelled: bool


Answer = Started | StartedAndSent | Sent | State | Answered | Cancelled


class ServiceError(Exception):
    """A call that cannot be served; ``str()`` is one line for the client."""


class AgentService:
    """``agent_start`` / ``agent_send`` / ``agent_get`` / ``agent_respond`` / ``agent_cancel``."""

    def __init__(self, runtime: ServingFacade, supervisor: Supervisor) -> None:
        self.runtime = runtime
        self.supervisor = supervisor
        self.owners = Owners(runtime)

    async def start(
        self,
        message: str,
        key: str | None = None,
        wait: float = 0.0,
        progress: Progress | None = None,
        output_schema: JSONObject | None = None,
        who: Principal = LOCAL,
    ) -> Started | StartedAndSent:
        """A new session with its first message; the same ``key`` again is that session (its
        message is delivered once, however the first call ended). ``who``: the caller (each
        call's principal, SPEC §18): its sessions are its own."""
        await self._allow(who, SEND)
        key = Owners.operation_id(who, key)
        rt = self.runtime
        # The session and its message are one record: servers given the same key at once
        # find one session, store the message once, and only one answers created.
        try:
            sid, created, receipt = await rt.start_session(
                message, operation_id=key, output_schema=output_schema,
                meta=Owners.meta(who), by=Owners.by(who),
            )  # fmt: skip
        except ValueError as exc:
            raise ServiceError(str(exc)) from None
        self.supervisor.kick(sid)  # also when its creator died before driving it (as over HTTP)
        state = await self._settled(sid, 0, wait, progress)
        if receipt is None:
            return {"sessionId": sid, "created": created, **state}
        return {"sessionId": sid, "created": created, **_received(receipt), **state}

    async def send(
        self,
        session_id: str,
        message: str,
        policy: TurnPolicy = "steer",
        wait: float = 0.0,
        progress: Progress | None = None,
        output_schema: JSONObject | None = None,
        who: Principal = LOCAL,
    ) -> Sent:
        """Deliver a message: it starts a turn, steers the running one or is queued for the
        next (``disposition`` says which)."""
        await self._allow(who, SEND, session_id)
        since = await self._length(session_id)
        out = await self._deliver(session_id, message, policy, output_schema, who)
        if out["disposition"] == "rejected":
            raise ServiceError(f"session {session_id}: message rejected: {out.get('reason')}")
        return {**out, **await self._settled(session_id, since, wait, progress)}

    async def get(
        self, session_id: str, since: int = 0, wait: float = 0.0, who: Principal = LOCAL
    ) -> State:
        """The session now, with its events from ``since``; with ``wait``, first up to that
        many seconds for an event after ``since`` (a poll that returns when there is news)."""
        await self._allow(who, READ, session_id)
        if wait > 0 and await self._length(session_id) <= since:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._next_event(session_id, since), min(wait, MAX_WAIT))
        return await self._state(session_id, since)

    async def respond(
        self,
        session_id: str,
        responses: list[InputResponse],
        wait: float = 0.0,
        progress: Progress | None = None,
        who: Principal = LOCAL,
    ) -> Answered:
        """Answer pending requests: approvals ``{requestId, approved, always?}``, questions
        ``{requestId, answer}``, interrupted calls ``{requestId, outcome, result?}`` (all but
        questions need the ``approve`` scope)."""
        await self._allow(who, SEND, session_id)
        await self._allow_answers(who, session_id, responses)
        since = await self._length(session_id)
        answered = self.runtime.respond(session_id, responses, by=Owners.by(who))
        receipt = await self._guard(session_id, answered)
        if receipt.disposition == "rejected":
            raise ServiceError(f"session {session_id}: {receipt.reason}")
        self.supervisor.kick(session_id)
        return {
            "accepted": len(responses),
            **await self._settled(session_id, since, wait, progress),
        }

    async def cancel(self, session_id: str, who: Principal = LOCAL) -> Cancelled:
        """Cancel the running turn (nothing cancelled runs; the session stays)."""
        await self._allow(who, SEND, session_id)
        since = await self._length(session_id)
        cancelled = self.runtime.cancel(session_id, by=Owners.by(who))
        receipt = await self._guard(session_id, cancelled)
        if receipt.disposition == "rejected":
            raise ServiceError(f"session {session_id}: {receipt.reason}")
        self.supervisor.kick(session_id)
        return {"cancelled": True, **await self._state(session_id, since)}

    async def _deliver(
        self,
        sid: str,
        message: str,
        policy: TurnPolicy,
        schema: JSONObject | None,
        who: Principal,
    ) -> ReceiptBody:
        delivered = self.runtime.deliver(
            sid, message, turn_policy=policy, output_schema=schema, by=Owners.by(who)
        )
        receipt = await self._guard(sid, delivered)
        if receipt.disposition != "rejected":
            self.supervisor.kick(sid)
        return _received(receipt)

    async def _settled(self, sid: str, since: int, wait: float, progress: Progress | None) -> State:
        """The state after the session's drive settled (at most ``wait`` seconds), telling
        ``progress`` each event meanwhile."""
        if wait > 0:
            told = _Told(since)
            follower = (
                asyncio.get_running_loop().create_task(self._follow(sid, told, progress))
                if progress is not None
                else None
            )
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.supervisor.settled(sid), min(wait, MAX_WAIT))
            finally:
                if follower is not None:
                    # Not while it tells one: a notification cancelled half-sent would be
                    # counted as told and never sent again.
                    async with told.lock:
                        follower.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await follower
            if progress is not None:  # what the follower had not reached yet
                for event in await self.runtime.call(self.runtime.events, sid, told.next):
                    await told.tell(event, progress)
        return await self._state(sid, since)

    async def _follow(self, sid: str, told: _Told, progress: Progress) -> None:
        async for event in self.runtime.tail(sid, told.next):
            await told.tell(event, progress)

    async def _next_event(self, sid: str, since: int) -> None:
        async for _ in self.runtime.tail(sid, since):
            return

    async def _state(self, sid: str, since: int) -> State:
        rt = self.runtime
        view = await self._guard(sid, rt.call(rt.session, sid, 0))  # no turns: its reply
        events = await rt.call(rt.events, sid, max(0, since))
        page = events[:MAX_EVENTS]
        reply = current_reply(view)
        state: State = {
            "sessionId": sid,
            "status": view["status"],
            "pending": view.get("pending") or [],
            "reply": reply["reply"],
            "turn": reply["turn"],
            "turnCount": view.get("turnCount"),
            "events": page,
            "next": max(0, since) + len(page),
        }
        if view.get("parkedOn"):
            state["parkedOn"] = view["parkedOn"]
        if len(events) > len(page):
            state["more"] = True
        return state

    async def _length(self, sid: str) -> int:
        """How many events the session has (the index a call's own events begin at)."""
        last = await self._guard(sid, self.runtime.call(self.runtime.events, sid, -1))
        return int(last[-1]["index"]) + 1 if last else 0

    async def _allow(self, who: Principal, scope: str, sid: str | None = None) -> None:
        """Refuse a caller without ``scope``, and tell one that does not own ``sid`` that it
        does not exist (as for an unknown id)."""
        if not who.may(scope):
            held = ", ".join(sorted(who.scopes)) or "none"
            raise ServiceError(f"this needs the {scope!r} scope; {who.subject} has {held}")
        if sid is not None:
            try:
                await self._guard(sid, self.owners.check(who, sid))
            except NotOwned:
                raise ServiceError(f"no session {sid!r}") from None

    async def _allow_answers(
        self, who: Principal, sid: str, responses: Sequence[Mapping[str, Any]]
    ) -> None:
        """An answer to anything but a question (an approval, an outcome) needs ``approve``."""
        if who.may(APPROVE):
            return
        view = await self._guard(sid, self.runtime.call(self.runtime.session, sid))
        await self._allow(who, answer_scope(view.get("pending") or [], responses))

    async def _guard(self, sid: str, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except InvalidSessionIdError:
            raise ServiceError(f"malformed session id {sid!r}") from None
        except SessionNotFoundError:
            raise ServiceError(f"no session {sid!r}") from None


def _received(receipt: Receipt) -> ReceiptBody:
    out: ReceiptBody = {"disposition": receipt.disposition}
    if receipt.reason:
        out["reason"] = receipt.reason
    return out


class _Told:
    """How far a call's progress notifications went."""

    def __init__(self, since: int) -> None:
        self.next = since  # the index of the next event to tell
        self.count = 0
        self.lock = asyncio.Lock()  # held while one is told (the follower is not cancelled then)

    async def tell(self, event: Event, progress: Progress) -> None:
        async with self.lock:
            index = int(event.get("index", self.next))
            if index < self.next:
                return
            self.next = index + 1
            if event.get("type") not in ("message.appended", "reasoning.appended"):
                # deltas are for streams
                self.count += 1
                await progress(self.count, describe(event))


def current_reply(view: SessionView) -> CurrentReply:
    """``reply``: the current (latest) turn's reply in a session view, None while it has none
    (a turn waiting for an approval has not replied: an earlier turn's words are not its);
    ``turn``: that turn (None before the first)."""
    reply = view.get("reply")
    if not reply:
        return {"reply": None, "turn": None}
    turn: TurnRef = {"id": reply["turnId"], "number": reply["turn"], "status": reply["status"]}
    return {"reply": reply["text"], "turn": turn}


def describe(event: Event) -> str:
    """One progress line for an event."""
    kind = str(event.get("type"))
    if kind == "message.completed" and event.get("text"):
        return f"{kind}: {str(event['text'])[:200]}"
    if kind in ("actions.requested",):
        names = ", ".join(str(a.get("name")) for a in event.get("actions") or [])
        return f"{kind}: {names}"
    if kind == "action.result":
        return f"{kind}: {event.get('name')} {event.get('status')}"
    if kind == "input.requested":
        return f"{kind}: {event.get('kind')} for {event.get('tool')}"
    return kind
