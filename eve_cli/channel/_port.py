"""What the channel needs from the runtime facade (`eve_cli.runtime.Runtime`, ARCHITECTURE §3).

Written as a protocol so the channel states its dependency exactly; the in-process
``Runtime`` and the HTTP client (:class:`eve_cli.channel.RemoteRuntime`) both fit it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol


class Receipt(Protocol):
    """The answer to a delivery: what happened to the message (SPEC D7)."""

    @property
    def disposition(self) -> str: ...  # started | steered | queued | rejected

    @property
    def reason(self) -> str | None: ...


class SessionRuntime(Protocol):
    """The facade calls the channel makes."""

    async def create_session(
        self, mode: str | None = None, model: str | None = None, operation_id: str | None = None
    ) -> str: ...

    async def deliver(self, session_id: str, message: str, turn_policy: str = "steer") -> Any: ...

    async def respond(self, session_id: str, responses: list[dict[str, Any]]) -> Any: ...

    async def cancel(self, session_id: str) -> Any: ...

    async def clear(self, session_id: str) -> Any: ...

    async def compact(self, session_id: str) -> Any: ...

    async def reset(self, session_id: str) -> Any: ...

    async def drive(self, session_id: str) -> Any: ...

    def resumable(self) -> list[str]: ...

    def session(self, session_id: str) -> dict[str, Any]: ...

    def sessions(self) -> list[dict[str, Any]]: ...

    def events(self, session_id: str, start: int = 0) -> list[dict[str, Any]]: ...

    def tail(self, session_id: str, start: int) -> AsyncIterator[dict[str, Any]]: ...
