"""JSON errors of the HTTP channel: every failure is ``{"error": {"code", "message"}}``.

Tree of what a handler may raise:

    ChannelError(status, code, message)   an HTTP answer, raised anywhere in a request
    runtime exceptions                     mapped by :func:`from_runtime_error`
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The error codes a client can branch on, by HTTP status.
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    500: "internal",
    503: "unavailable",
}


class ChannelError(Exception):
    """An HTTP error answer with a one-line message saying what is wrong and what to do."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The JSON body of an error answer."""
    return {"error": {"code": code, "message": message}, **extra}


def error_response(status: int, message: str, code: str | None = None) -> JSONResponse:
    """A JSON error answer with the given status."""
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        error_body(code or _CODES.get(status, "error"), message), status, headers=headers
    )


def from_runtime_error(exc: Exception, session_id: str | None = None) -> ChannelError:
    """Map an exception raised by the runtime facade to an HTTP error.

    The facade's exception names carry their meaning (unknown session, conflict, invalid
    input); anything else is an internal error whose message is still one line.
    """
    name = type(exc).__name__
    text = str(exc) or name
    if "Unknown" in name or "NotFound" in name or isinstance(exc, KeyError | LookupError):
        if session_id:
            return ChannelError(
                404, f"session {session_id!r} does not exist; GET /eve/v1/sessions lists them"
            )
        return ChannelError(404, text)
    if "Conflict" in name or "Ownership" in name or "NotPending" in name:
        return ChannelError(409, text)
    if isinstance(exc, ValueError | TypeError):
        return ChannelError(400, text)
    return ChannelError(500, f"{name}: {text}")


async def on_channel_error(request: Request, exc: Exception) -> Response:
    """Starlette handler for :class:`ChannelError`."""
    assert isinstance(exc, ChannelError)
    return error_response(exc.status, exc.message, exc.code)


async def on_http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown route, wrong method) as JSON."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}; see GET /eve/v1/info"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, message)


class CatchAll:
    """ASGI middleware: an unexpected exception becomes a JSON 500 and one log line, never a
    traceback (Starlette's own last-resort handler re-raises, and uvicorn prints it)."""

    def __init__(self, app: ASGIApp, log: Callable[[str], None]) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            line = f"{type(exc).__name__}: {exc}"
            self.log(f"{scope.get('method')} {scope.get('path')}: {line}")
            if not started:  # otherwise the client sees the response end early
                await error_response(500, f"internal error: {line}")(scope, receive, send)
