"""Who is calling (SPEC §18): every request but the open paths gets a principal from the
server's verifiers (`eve_cli.auth`), or one clear 401/403/503; the loopback rule; session-id
validation."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from eve_cli.auth import LOCAL, AuthRequest, Principal, Refused, Verifiers
from eve_cli.channel._errors import error_response
from eve_cli.channel._owners import ANONYMOUS
from eve_cli.channel._web import WEB_PATHS

# Paths anyone may call without a token: a liveness probe, the readiness probe (it names parts,
# not data), the browser view's own files and its login settings reveal nothing (the page logs
# in before it reads anything).
OPEN_PATHS = frozenset({"/eve/v1/health", "/eve/v1/ready", "/eve/v1/auth", *WEB_PATHS})
# Query parameters that would carry a credential: refused, since URLs end up in logs.
_TOKEN_PARAMS = frozenset({"access_token", "token", "id_token", "api_key", "apikey", "auth",
                           "authorization", "bearer", "jwt"})  # fmt: skip

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


def check_bind(host: str, token: object) -> None:
    """Refuse a non-loopback bind without a verifier (``token``: a token or the verifiers; one
    clear line)."""
    if not is_loopback(host) and not token:
        raise BindRefusedError(
            f"refusing to listen on {host}: it is not a loopback address and no token is set; "
            "set EVE_AUTH_TOKEN, pass --token or another --auth-* option (or bind 127.0.0.1)"
        )


def is_session_id(value: str, *, child: bool = False) -> bool:
    """True when ``value`` is a well-formed session id (says nothing about existence);
    with ``child``, a sub-agent's session id too."""
    return bool(_SESSION_ID.fullmatch(value) or (child and _CHILD_ID.fullmatch(value)))


def parent_of(sid: str) -> str | None:
    """The root session of a sub-agent's session id (None for any other value)."""
    return sid.split(".", 1)[0] if _CHILD_ID.fullmatch(sid) else None


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None: none, or another
    scheme, left to a custom verifier)."""
    if not header:
        return None
    scheme, _, given = header.partition(" ")
    return (given.strip() or None) if scheme.lower() == "bearer" else None


class AuthGate:
    """ASGI middleware: every HTTP request but the open paths needs a principal from
    ``verifiers`` (none configured: the loopback server's one person, :data:`LOCAL`); a
    refusal is answered in one line and logged without the token."""

    def __init__(self, app: ASGIApp, verifiers: Verifiers, log: Callable[[str], None]) -> None:
        self.app = app
        self.verifiers = verifiers
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            principal = await self._principal(scope)
        except Refused as exc:
            client = (scope.get("client") or ("?",))[0]
            self.log(f"auth: {scope['method']} {scope['path']} from {client}: {exc} "
                     f"({exc.status})")  # fmt: skip
            await error_response(exc.status, str(exc))(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    async def _principal(self, scope: Scope) -> Principal:
        query = scope.get("query_string", b"").decode("latin-1")
        if query and any(k.lower() in _TOKEN_PARAMS for k, _ in parse_qsl(query, True)):
            raise Refused(
                "a token in the URL's query string is refused (URLs end up in logs): send it "
                "as 'Authorization: Bearer <token>'"
            )
        if scope["path"] in OPEN_PATHS:
            return ANONYMOUS
        if not self.verifiers:
            return LOCAL
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        token = bearer_token(headers.get("authorization"))
        request = AuthRequest(token, headers, scope["method"], scope["path"])
        return await self.verifiers.verify(request)
