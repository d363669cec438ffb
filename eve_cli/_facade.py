"""The runtime facade (docs/RUNTIME.md): the one description of what a caller of sessions uses.

Two implementations: :class:`eve_cli.runtime.Runtime` in-process, and
:class:`eve_cli.channel.RemoteRuntime` over the HTTP channel. Every caller (the channel, the
chat loop, the other commands) is typed against :class:`Facade`, and ``_conformance`` below
makes mypy check both implementations against it, so they cannot drift apart. The channel,
which serves sessions, needs two more calls only the store's own process can answer
(:class:`ServingFacade`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NotRequired, Protocol, TypedDict, TypeVar, overload

from eve_cli._json import JSONObject

if TYPE_CHECKING:
    from eve_cli._events import Event
    from eve_cli._schedules import Schedule, ScheduleRow
    from eve_cli.channel.client import RemoteRuntime
    from eve_cli.execution import Forked, Lineage, SessionView
    from eve_cli.runtime import Runtime

TurnPolicy = Literal["steer", "queue"]
JsonSchema = JSONObject  # a JSON schema object (a turn's output schema)
# Who asked (SPEC §18): a principal's record, ``{"subject", "tenant"?}``, kept in the events.
By = dict[str, str]
T = TypeVar("T")


class Receipt(Protocol):
    """The answer to a delivery or an operation: what happened to it (SPEC D7)."""

    @property
    def disposition(self) -> str: ...  # started | steered | queued | accepted | rejected

    @property
    def reason(self) -> str | None: ...


class ReceiptBody(TypedDict):
    """A receipt as the channel and MCP answer it: what happened, and why when it was
    rejected."""

    disposition: str
    reason: NotRequired[str]


class SessionStatus(TypedDict):
    """What ``drive(..., view=False)`` returns at least (a whole view also fits)."""

    id: str
    status: str


class Facade(Protocol):
    """The session calls: create, deliver, answer, operate, drive, read, follow."""

    async def create_session(
        self, mode: str | None = None, model: str | None = None, operation_id: str | None = None
    ) -> str: ...

    async def deliver(
        self,
        sid: str,
        message: str,
        turn_policy: TurnPolicy = "steer",
        output_schema: JsonSchema | None = None,
    ) -> Receipt:
        """Start, steer or queue a turn with ``message`` (whose answer follows
        ``output_schema``, when given), or say why not."""
        ...

    async def respond(self, sid: str, responses: list[dict[str, Any]]) -> Receipt:
        """Answer pending approvals or questions."""
        ...

    async def cancel(self, sid: str) -> Receipt: ...

    async def clear(self, sid: str) -> Receipt: ...

    async def compact(self, sid: str) -> Receipt: ...

    async def reset(self, sid: str) -> Receipt: ...

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
        """Run the session until it waits, parks or ends (``view=False``: only its status)."""
        ...

    async def fork(self, sid: str, at: str | None = None) -> Forked:
        """A new session from checkpoint ``at`` of ``sid`` (``T`` or ``T.S``; None: the
        latest): ``{"sessionId", "forkedFrom", "checkpoint"}`` (SPEC §15)."""
        ...

    def lineage(self, sid: str) -> Lineage:
        """``{"forkedFrom": {"session", "checkpoint", "at"} | None, "forks": [ids]}``."""
        ...

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Make one of these sync calls from an event loop (off it where the world's every
        call is a round trip)."""
        ...

    def resumable(self) -> list[str]:
        """Sessions this process should drive on: interrupted ones with work left."""
        ...

    def session(
        self, sid: str, turns: int | None = ..., from_turn: int | None = None
    ) -> SessionView:
        """The view with a page of its turns: the latest ``turns`` (None: all), or ``turns``
        from number ``from_turn`` (None: all from there); ``turnCount``: how many it has."""
        ...

    def sessions(self) -> list[dict[str, Any]]:
        """One `SessionRow` a session, most recently active first."""
        ...

    def events(self, sid: str, start: int = 0) -> list[Event]:
        """Stored events from ``start`` (negative: from the tail), without following."""
        ...

    def tail(self, sid: str, start: int = 0) -> AsyncIterator[Event]:
        """Stored events from ``start``, then live ones."""
        ...

    def close(self) -> None: ...


class ServingFacade(Facade, Protocol):
    """What a server of sessions (the HTTP channel) needs beyond :class:`Facade`: only the
    process that owns the store can answer these, so `RemoteRuntime` has no such methods."""

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
    ) -> tuple[str, bool, Receipt | None]:
        """Create a session with its first message in its creation record, idempotent by
        ``operation_id`` across processes: its id, whether this call created it, and its
        message's receipt (delivered now if an earlier create made it without one; None: no
        message, or it had one already)."""
        ...

    # The session calls again, with who asks (``by``, SPEC §18: recorded in the events) and a
    # creation's meta (its ``owner``).
    async def create_session(
        self,
        mode: str | None = None,
        model: str | None = None,
        operation_id: str | None = None,
        *,
        task: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> str: ...

    async def deliver(
        self,
        sid: str,
        message: str,
        turn_policy: TurnPolicy = "steer",
        output_schema: JsonSchema | None = None,
        *,
        by: By | None = None,
    ) -> Receipt: ...

    async def respond(
        self, sid: str, responses: Sequence[Mapping[str, Any]], *, by: By | None = None
    ) -> Receipt: ...

    async def cancel(self, sid: str, *, by: By | None = None) -> Receipt: ...

    async def clear(self, sid: str, *, by: By | None = None) -> Receipt: ...

    async def compact(self, sid: str, *, by: By | None = None) -> Receipt: ...

    async def reset(self, sid: str, *, by: By | None = None) -> Receipt: ...

    async def fork(self, sid: str, at: str | None = None, *, by: By | None = None) -> Forked: ...

    def owner(self, sid: str) -> By | None:
        """Who created session ``sid`` (None: made without principals)."""
        ...

    def operation_session(self, operation_id: str) -> str | None:
        """The session a create with this ``operation_id`` made, if any (a retried create)."""
        ...

    def ever_delivered(self, sid: str) -> bool:
        """Whether the session ever received a delivery."""
        ...

    def agent_error(self) -> str | None:
        """Why the agent folder does not load as it is now (None: it loads)."""
        ...

    def now(self) -> float:
        """The world's clock, which timers and schedule ticks are compared with."""
        ...

    def store_id(self) -> str | None:
        """The id of the store this runtime serves, read from it now (`world.store_identity`)."""
        ...

    def timers(self, sid: str | None = None) -> dict[str, float]:
        """When each session parked on a timer is due (every session's, or ``sid``'s)."""
        ...

    def timers_version(self) -> Hashable:
        """A token that changes when any process puts a session to sleep (None: unknown)."""
        ...

    def timers_since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        """The version now, and the sessions put to sleep since ``version`` (None: unknown)."""
        ...

    async def wait_timers(self, version: Hashable, timeout: float) -> bool:
        """Wait until ``timers_version()`` differs from ``version``; False on timeout."""
        ...

    def schedules(self) -> tuple[list[Schedule], list[str]]:
        """The agent's schedules and a ``file:line: what`` line per broken file."""
        ...

    def schedule_ticks(self) -> dict[str, float]:
        """The latest tick each schedule started a session for."""
        ...

    def schedule_rows(self) -> tuple[list[ScheduleRow], list[str]]:
        """What `eve schedules` and ``GET /eve/v1/schedules`` list."""
        ...

    async def run_schedule(self, schedule: Schedule, tick: float) -> tuple[str, bool]:
        """The session of a schedule's tick, started unless it exists; whether this did."""
        ...

    async def run_schedule_now(self, name: str) -> str:
        """Start a session of schedule ``name`` now (by hand); `LookupError` if none."""
        ...


def _conformance(local: Runtime, remote: RemoteRuntime) -> tuple[ServingFacade, Facade]:
    """Never called: mypy checks here that both implementations are a :class:`Facade` (and
    the in-process one a :class:`ServingFacade`)."""
    return local, remote


__all__ = ["By", "Facade", "Receipt", "ReceiptBody", "ServingFacade", "SessionStatus", "TurnPolicy"]
