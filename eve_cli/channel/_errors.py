"""JSON errors of the HTTP channel: every failure is ``{"error": {"code", "message"}}``.

What a handler may raise:

    ChannelError(status, message, code)   an HTTP answer, raised anywhere in a request
    the facade's exceptions               mapped by the explicit table :data:`FACADE_ERRORS`
    anything else                         a bug: logged with its traceback, answered 500
"""

from __future__ import annotations

import errno
import traceback
from collections.abc import Callable
from typing import TypedDict

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from eve_cli._hints import user_message
from eve_cli.runtime import ForkPointError, InvalidSessionIdError, SessionNotFoundError
from world import (
    CorruptJournalError,
    ForkError,
    HookConflictError,
    NoActiveRunError,
    OwnershipError,
    RunNotFoundError,
    SerializationError,
    StorageError,
    StoreUnavailableError,
)

# The error codes a client can branch on, by HTTP status.
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    421: "misdirected_request",
    500: "internal",
    503: "unavailable",
    507: "insufficient_storage",
}


class ChannelError(Exception):
    """An HTTP error answer with a one-line message saying what is wrong and what to do."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message


class ErrorDetail(TypedDict):
    code: str
    message: str


class ErrorBody(TypedDict):
    """The JSON body of an error answer."""

    error: ErrorDetail


def error_body(code: str, message: str) -> ErrorBody:
    """The JSON body of an error answer."""
    return {"error": {"code": code, "message": message}}


def error_response(status: int, message: str, code: str | None = None) -> JSONResponse:
    """A JSON error answer with the given status (a 503 says when to retry)."""
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    if status == 503:
        headers = {"retry-after": str(RETRY_AFTER)}
    return JSONResponse(
        error_body(code or _CODES.get(status, "error"), message), status, headers=headers
    )


# Seconds a client waits before retrying a 503: a store restarting, or a session another
# worker takes over (a lease lasts seconds; a takeover after a kill takes well under one).
RETRY_AFTER = 1

_NOTHING_LOST = (
    "nothing stored before was lost, and this request did not complete: retry it once there is "
    "space (a create with the same operationId)"
)

# The facade's exceptions and their answers, looked up along the exception's class hierarchy.
# Each entry: (status, code, message); the message may use {sid} and {error}.
FACADE_ERRORS: dict[type[BaseException], tuple[int, str, str]] = {
    SessionNotFoundError: (404, "not_found", "{missing}"),
    RunNotFoundError: (404, "not_found", "{missing}"),
    InvalidSessionIdError: (400, "bad_request", "{error}"),
    ForkPointError: (409, "conflict", "{error}"),
    ForkError: (409, "conflict", "{error}"),
    # This worker lost the session's lease (another one drives it now): nothing of the
    # request was stored; the same request succeeds on retry.
    OwnershipError: (503, "unavailable", "{error}; nothing of this request was stored: retry it"),
    HookConflictError: (409, "conflict", "{error}"),
    NoActiveRunError: (409, "conflict", "session {sid} has ended; it takes no deliveries"),
    # A value the request carried has no stored form (a body's text is checked on arrival).
    SerializationError: (400, "bad_request", "{error}"),
    StoreUnavailableError: (
        503,
        "unavailable",
        "{error}; retry the request (a create with the same operationId: it is made once)",
    ),
    StorageError: (
        507,
        "insufficient_storage",
        "storage refused a write ({error}); " + _NOTHING_LOST,
    ),
    CorruptJournalError: (500, "damaged", "{error}"),
}


def from_runtime_error(exc: BaseException, session_id: str | None = None) -> ChannelError | None:
    """The HTTP answer to an exception the facade raised, from :data:`FACADE_ERRORS`; None
    when it is not one of the facade's (a bug: the caller lets it reach :class:`CatchAll`)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        # The disk is full under a write that did not go through the world's own checks.
        where = f" ({exc.filename})" if exc.filename else ""
        return ChannelError(507, f"the disk is full{where}; {_NOTHING_LOST}")
    for cls in type(exc).__mro__:
        entry = FACADE_ERRORS.get(cls)
        if entry is not None:
            status, code, message = entry
            missing = (
                f"session {session_id!r} does not exist; GET /eve/v1/sessions lists them"
                if session_id
                else str(exc)
            )
            error = user_message(exc) or cls.__name__  # damaged data: with what to do
            text = message.format(sid=session_id, error=error, missing=missing)
            return ChannelError(status, text, code)
    return None


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
    """ASGI middleware: an unexpected exception becomes a JSON 500, and its traceback is logged
    once (Starlette's own last-resort handler re-raises, and uvicorn would print it)."""

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
            # A bug: its traceback goes to the server log, never into the response.
            trace = "".join(traceback.format_exception(exc)).rstrip()
            self.log(f"internal error in {scope.get('method')} {scope.get('path')}:\n{trace}")
            if not started:  # otherwise the client sees the response end early
                message = f"internal error ({type(exc).__name__}); the server log has the details"
                await error_response(500, message)(scope, receive, send)
