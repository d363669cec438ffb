"""What the channel needs from the runtime facade (`eve_cli.runtime.Runtime`, ARCHITECTURE §3).

Written as a protocol so the channel states its dependency exactly; the in-process
``Runtime`` and the HTTP client (:class:`eve_cli.channel.RemoteRuntime`) both fit it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, Protocol, TypeVar

TurnPolicy = Literal["steer", "queue"]
T = TypeVar("T")


class SessionRuntime(Protocol):
    """The facade calls the channel makes."""

    async def create_session(
        self, mode: str | None = None, model: str | None = None, operation_id: str | None = None
    ) -> str: ...

    async def deliver(self, sid: str, message: str, turn_policy: TurnPolicy = "steer") -> Any: ...

    async def respond(self, sid: str, responses: list[dict[str, Any]]) -> Any: ...

    async def cancel(self, sid: str) -> Any: ...

    async def clear(self, sid: str) -> Any: ...

    async def compact(self, sid: str) -> Any: ...

    async def reset(self, sid: str) -> Any: ...

    async def drive(self, sid: str, *, view: bool = True) -> Any: ...

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Make one of these sync calls from the event loop (off it where the world's every
        call is a round trip)."""
        ...

    def resumable(self) -> list[str]: ...

    def operation_session(self, operation_id: str) -> str | None: ...

    def ever_delivered(self, sid: str) -> bool: ...

    def session(self, sid: str) -> dict[str, Any]: ...

    def sessions(self) -> list[dict[str, Any]]: ...

    def events(self, sid: str, start: int = 0) -> list[dict[str, Any]]: ...

    def tail(self, sid: str, start: int) -> AsyncIterator[dict[str, Any]]: ...
