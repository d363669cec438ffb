"""Which scope each route needs (SPEC §18): every route of the app is wrapped by :func:`need`
or marked :func:`public`, and a test walks the route table to hold every route to that."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from eve_cli.auth import Principal, Refused, Verifiers
from eve_cli.channel._errors import ChannelError, error_response
from eve_cli.channel._owners import principal_of

Endpoint = Callable[[Request], Awaitable[Response]]
PUBLIC = "public"


def need(scope: str, endpoint: Endpoint) -> Endpoint:
    """``endpoint`` answering only a principal with ``scope`` (403 for another)."""

    async def guarded(request: Request) -> Response:
        check(principal_of(request.scope), scope)
        return await endpoint(request)

    guarded.eve_scope = scope  # type: ignore[attr-defined]
    return guarded


def public(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` open to anyone (it reveals nothing stored)."""

    async def opened(request: Request) -> Response:
        return await endpoint(request)

    opened.eve_scope = PUBLIC  # type: ignore[attr-defined]
    return opened


class NeedApp:
    """An ASGI app (``/mcp``) answering only a principal with ``scope``."""

    def __init__(self, scope: str, app: ASGIApp) -> None:
        self.eve_scope = scope
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            check(principal_of(scope), self.eve_scope)
        except ChannelError as exc:
            await error_response(exc.status, exc.message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def check(principal: Principal, scope: str) -> None:
    """Raise 403 unless ``principal`` holds ``scope``."""
    if not principal.may(scope):
        held = ", ".join(sorted(principal.scopes)) or "none"
        raise ChannelError(403, f"this needs the {scope!r} scope; {principal.subject} has {held}")


async def login_settings(verifiers: Verifiers) -> dict[str, str]:
    """How the browser view logs in (``GET /eve/v1/auth``): ``{"login": "oidc", issuer,
    clientId, scope, authorizationEndpoint, tokenEndpoint}`` with an issuer to log in with,
    else ``{"login": "token"}``, or ``{"login": "none"}`` with no verifier."""
    login = verifiers.login
    if login is None:
        return {"login": "token" if verifiers else "none"}
    try:
        endpoints = await login.endpoints()
    except Refused as exc:
        raise ChannelError(exc.status, str(exc)) from None
    return {"login": "oidc", "issuer": login.issuer, "clientId": login.client_id,
            "scope": login.scope, **endpoints}  # fmt: skip


def route_scope(endpoint: Any) -> str | None:
    """The scope a route's endpoint was wrapped with (None: not wrapped: a bug)."""
    scope = getattr(endpoint, "eve_scope", None)
    return scope if isinstance(scope, str) else None
