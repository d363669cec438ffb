"""Bearer-token authentication, the loopback rule and session-id validation."""

from __future__ import annotations

import hmac
import ipaddress
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from eve_cli.channel._errors import error_response
from eve_cli.channel._web import WEB_PATHS

# Paths anyone may call without a token: a liveness probe and the browser view's own files
# reveal nothing (the page asks for the token before it reads anything).
_OPEN_PATHS = frozenset({"/eve/v1/health", "/eve/v1/ready", *WEB_PATHS})

# Session ids (docs/RUNTIME.md): letters, digits, '-' and '_'; never a path.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A sub-agent's session: its parent's id and `.<n>` parts (as the runtime has them).
_CHILD_ID = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[0-9]{1,9}){1,16}")


class BindRefusedError(Exception):
    """Serving on a non-loopback address without a token."""


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback bind without a bearer token (one clear line)."""
    if not is_loopback(host) and not token:
        raise BindRefusedError(
            f"refusing to listen on {host}: it is not a loopback address and no token is set; "
            "set EVE_AUTH_TOKEN or pass --token (or bind 127.0.0.1)"
        )


def is_session_id(value: str, *, child: bool = False) -> bool:
    """True when ``value`` is a well-formed session id (says nothing about existence);
    with ``child``, a sub-agent's session id too."""
    return bool(_SESSION_ID.fullmatch(value) or (child and _CHILD_ID.fullmatch(value)))


def parent_of(sid: str) -> str | None:
    """The root session of a sub-agent's session id (None for any other value)."""
    return sid.split(".", 1)[0] if _CHILD_ID.fullmatch(sid) else None


def token_matches(header: str | None, token: str) -> bool:
    """Compare an ``Authorization`` header with the expected token in constant time."""
    if not header:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


class BearerAuth:
    """ASGI middleware: every HTTP request but the health probe needs ``Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.token or scope["path"] in _OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        if not token_matches(header, self.token):
            message = (
                "missing bearer token: send 'Authorization: Bearer <token>'"
                if header is None
                else "bad bearer token"
            )
            await error_response(401, message)(scope, receive, send)
            return
        await self.app(scope, receive, send)
