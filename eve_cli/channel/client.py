"""A client of a running `eve start` server with the runtime facade's methods.

`eve chat --url URL` drives a remote session through :class:`RemoteRuntime` exactly as it drives
an in-process ``Runtime``: create or open a session, deliver, answer input requests, read and
tail events, and ``drive`` — which here waits for the server's own background drive to settle
the turn instead of running it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import httpx

from eve_cli._json import JSONObject

if TYPE_CHECKING:
    from eve_cli._events import Event
    from eve_cli._facade import JsonSchema, TurnPolicy
    from eve_cli.execution import Forked, Lineage, SessionView

T = TypeVar("T")

__all__ = ["RemoteError", "RemoteReceipt", "RemoteRuntime"]

_DONE = object()  # the server ended the stream
_TURN_UNDER_WAY = ("running", "parked")  # view statuses a cancel ends with an event


class Posted(TypedDict, total=False):
    """A body the channel's POSTs take: a new session (``mode``, ``operationId``, maybe its
    first ``message``), a delivery (``message`` with ``turnPolicy`` and ``outputSchema``, or
    ``inputResponses``), a fork (``at``); an action's is empty."""

    message: str
    turnPolicy: TurnPolicy
    outputSchema: JsonSchema
    inputResponses: list[JSONObject]
    mode: str
    operationId: str
    at: str


class RemoteError(Exception):
    """The server answered with an error; ``str()`` is its one-line message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class RemoteReceipt:
    """What the server did with a delivery: started | steered | queued | rejected."""

    disposition: str
    reason: str | None = None


_ACCEPTED = RemoteReceipt("accepted")


class RemoteRuntime:
    """The facade's session methods over HTTP (see docs/RUNTIME.md and docs/SERVING.md)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        self._sync: httpx.Client | None = None
        # Per session: the stream length before the last delivery (`drive` waits for what
        # follows), and whether that delivery must produce events before the session can be
        # taken as settled (a queued message to a parked session produces none).
        self._marks: dict[str, tuple[int, bool]] = {}

    # -- reads (synchronous, like the facade's) ----------------------------------------

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """One of the reads below from an event loop, as ``Runtime.call``: on a thread (each
        is a blocking HTTP request)."""
        return await asyncio.to_thread(fn, *args)

    def info(self) -> JSONObject:
        """The server's ``/info``."""
        result: JSONObject = self._get("/info")
        return result

    def session(
        self, sid: str, turns: int | None = 20, from_turn: int | None = None
    ) -> SessionView:
        """The session's view, as ``Runtime.session`` (the latest 20 turns by default)."""
        params: dict[str, int | str] = {"turns": "all" if turns is None else turns}
        if from_turn is not None:
            params["fromTurn"] = from_turn
        result: SessionView = self._request(f"/session/{sid}", params).json()
        return result

    def sessions(self) -> list[dict[str, Any]]:
        """Every session, as ``Runtime.sessions``."""
        result: list[dict[str, Any]] = self._get("/sessions")["sessions"]
        return result

    def events(self, sid: str, start: int = 0) -> list[Event]:
        """Stored events from ``start`` (negative: from the tail), without following."""
        response = self._request(f"/session/{sid}/stream", {"startIndex": start, "follow": "false"})
        return [json.loads(line) for line in response.text.splitlines() if line.strip()]

    # -- commands ------------------------------------------------------------------------

    async def create_session(
        self, mode: str | None = None, model: str | None = None, operation_id: str | None = None
    ) -> str:
        """Create a session (``model`` is chosen by the server's agent and ignored here)."""
        body: Posted = {}
        if mode:
            body["mode"] = mode
        if operation_id:
            body["operationId"] = operation_id
        result = await self._post("/session", body)
        return str(result["sessionId"])

    async def deliver(
        self,
        sid: str,
        message: str,
        turn_policy: TurnPolicy = "steer",
        output_schema: JsonSchema | None = None,
    ) -> RemoteReceipt:
        """Deliver a message; the server starts, steers, queues or rejects it."""
        body: Posted = {"message": message, "turnPolicy": turn_policy}
        if output_schema is not None:
            body["outputSchema"] = output_schema
        try:
            result = await self._marked(sid, f"/session/{sid}", body)
        except RemoteError as exc:
            if exc.code == "rejected":
                return RemoteReceipt("rejected", str(exc))
            raise
        reason = result.get("reason")
        receipt = RemoteReceipt(str(result["disposition"]), None if reason is None else str(reason))
        if receipt.disposition == "queued":
            index, _ = self._marks[sid]
            self._marks[sid] = (index, False)
        return receipt

    async def respond(self, sid: str, responses: list[dict[str, Any]]) -> RemoteReceipt:
        """Answer pending approvals or questions (a rejection raises `RemoteError`)."""
        await self._marked(sid, f"/session/{sid}", {"inputResponses": responses})
        return _ACCEPTED

    async def cancel(self, sid: str) -> RemoteReceipt:
        """Cancel the running turn; a session that runs no turn writes nothing for it, so a
        `drive` after it has nothing to wait for."""
        if sid not in self._marks and self.session(sid).get("status") not in _TURN_UNDER_WAY:
            await self._post(f"/session/{sid}/cancel", {})
            return _ACCEPTED
        return await self._action(sid, "cancel")

    async def clear(self, sid: str) -> RemoteReceipt:
        return await self._action(sid, "clear")

    async def compact(self, sid: str) -> RemoteReceipt:
        return await self._action(sid, "compact")

    async def reset(self, sid: str) -> RemoteReceipt:
        return await self._action(sid, "reset")

    async def fork(self, sid: str, at: str | None = None) -> Forked:
        """Fork the session at checkpoint ``at`` (None: the latest); the new session's id,
        ``forkedFrom`` and ``checkpoint``."""
        found = await self._post(f"/session/{sid}/fork", {"at": at} if at else {})
        return {
            "sessionId": str(found["sessionId"]),
            "forkedFrom": str(found["forkedFrom"]),
            "checkpoint": str(found["checkpoint"]),
        }

    def lineage(self, sid: str) -> Lineage:
        """Where the session was forked from and its forks (from its view)."""
        view = self.session(sid)
        found: Lineage = {"forkedFrom": view.get("forkedFrom"), "forks": view.get("forks") or []}
        return found

    def resumable(self) -> list[str]:
        """None here: the server drives its own sessions on."""
        return []

    async def drive(self, sid: str, *, wait: float | None = None, view: bool = True) -> SessionView:
        """Wait until the server's drive of the session settles; returns the session view.

        `wait` is accepted for the chat loop's sake and ignored: the server owns its sessions;
        the view is whole even with ``view=False`` (the server folds it anyway).
        """
        from eve_cli.execution import opens_session, settles  # the fold: what events mean

        mark, patient = self._marks.pop(sid, (None, False))
        if mark is None:
            current = self.session(sid)
            if current.get("status") != "running":
                return current
            mark = self._length(sid)
        seen = False
        async with contextlib.aclosing(self._follow(sid, mark)) as events:
            async for event in events:
                if patient and not seen and event is not None and opens_session(event):
                    # What the first drive of a new session emits before it takes the
                    # delivery that started it: not yet the delivery's effect (the view still
                    # says "waiting" until the delivered message is taken).
                    continue
                # Ask the view after a settling event, or on the opening line and heartbeats
                # once the delivery had its effect (or was not expected to have one).
                quiet = event is None and (seen or not patient)
                if quiet or (event is not None and settles(event)):
                    current = self.session(sid)
                    if current.get("status") != "running":
                        return current
                seen = seen or event is not None
        return self.session(sid)

    async def tail(self, sid: str, start: int = 0) -> AsyncIterator[Event]:
        """Stored events from ``start``, then live ones; after a dropped connection it
        reconnects from the next index."""
        async with contextlib.aclosing(self._follow(sid, start)) as events:
            async for event in events:
                if event is not None:
                    yield event

    async def _follow(self, sid: str, start: int) -> AsyncGenerator[Event | None]:
        """Events from ``start``; None for each heartbeat.

        The connection lives in a task of its own, so a caller that stops iterating without
        closing this generator (``break``) leaves nothing that must be closed from its task.
        """
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=256)
        reader = asyncio.get_running_loop().create_task(self._read_stream(sid, start, queue))
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read_stream(self, sid: str, start: int, queue: asyncio.Queue[Any]) -> None:
        next_index = start
        try:
            for _attempt in range(3):
                try:
                    async with (
                        httpx.AsyncClient(headers=self._headers, timeout=None) as client,
                        client.stream(
                            "GET",
                            f"{self.url}/eve/v1/session/{sid}/stream",
                            params={"startIndex": next_index},
                        ) as response,
                    ):
                        if response.status_code >= 400:
                            await response.aread()
                            _raise_for(response)
                        async for line in response.aiter_lines():
                            event = json.loads(line) if line.strip() else None
                            if event is not None:
                                next_index = int(event.get("index", next_index)) + 1
                            await queue.put(event)  # None: the opening newline, heartbeats
                    await queue.put(_DONE)
                    return
                except (httpx.RemoteProtocolError, httpx.ReadError):
                    continue
            raise RemoteError(0, "disconnected", f"lost the event stream of {sid} at {self.url}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await queue.put(exc)

    def close(self) -> None:
        """Release the connection pool."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    def __enter__(self) -> RemoteRuntime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------

    async def _marked(self, sid: str, path: str, body: Posted) -> JSONObject:
        """POST a delivery, remembering where the stream stood before it (for `drive`)."""
        if sid not in self._marks:
            self._marks[sid] = (self._length(sid), True)
        try:
            return await self._post(path, body)
        except RemoteError:
            self._marks.pop(sid, None)  # nothing was delivered: nothing to wait for
            raise

    def _length(self, sid: str) -> int:
        last = self.events(sid, -1)
        return int(last[-1]["index"]) + 1 if last else 0

    def _client(self) -> httpx.Client:
        if self._sync is None:
            self._sync = httpx.Client(headers=self._headers, timeout=self._timeout)
        return self._sync

    def _get(self, path: str) -> Any:
        return self._request(path).json()

    def _request(self, path: str, params: dict[str, int | str] | None = None) -> httpx.Response:
        try:
            response = self._client().get(f"{self.url}/eve/v1{path}", params=params)
        except httpx.TransportError as exc:
            raise RemoteError(0, "unreachable", f"cannot reach {self.url}: {exc}") from None
        _raise_for(response)
        return response

    async def _post(self, path: str, body: Posted) -> JSONObject:
        async with httpx.AsyncClient(headers=self._headers, timeout=self._timeout) as client:
            try:
                response = await client.post(f"{self.url}/eve/v1{path}", json=body)
            except httpx.TransportError as exc:
                raise RemoteError(0, "unreachable", f"cannot reach {self.url}: {exc}") from None
        _raise_for(response)
        result: JSONObject = response.json()
        return result

    async def _action(self, sid: str, name: str) -> RemoteReceipt:
        await self._marked(sid, f"/session/{sid}/{name}", {})
        return _ACCEPTED


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http", f"HTTP {response.status_code}: {response.text[:200]}"
    raise RemoteError(response.status_code, code, message)
