"""The verifiers of one server, tried in order: static tokens, JWTs, a custom verifier."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from eve_cli.auth._jwt import JwtVerifier
from eve_cli.auth._keys import FETCH_TIMEOUT, discover
from eve_cli.auth._principal import Principal, Refused
from eve_cli.auth._static import StaticTokens


@dataclass(frozen=True)
class AuthRequest:
    """What a custom verifier sees of a request: its bearer token (None: none sent), its
    headers (lower-case names; ``authorization`` holds the token too), method and path."""

    token: str | None
    headers: Mapping[str, str]
    method: str
    path: str


CustomVerifier = Callable[[AuthRequest], "Principal | Awaitable[Principal | None] | None"]


@dataclass
class OidcLogin:
    """What the browser view needs to log in with the issuer (authorization code + PKCE)."""

    issuer: str
    client_id: str
    scope: str = "openid"
    _endpoints: dict[str, str] | None = field(default=None, repr=False)

    @property
    def origin(self) -> str:
        """The issuer's origin (``scheme://host[:port]``): the page may call it."""
        parts = urlsplit(self.issuer)
        return f"{parts.scheme}://{parts.netloc}"

    async def endpoints(self) -> dict[str, str]:
        """The issuer's authorization and token endpoints, from its discovery document (read
        once); `Refused` (503) while it cannot be read."""
        if self._endpoints is None:
            try:
                async with httpx.AsyncClient(timeout=FETCH_TIMEOUT) as client:
                    found = await discover(client, self.issuer)
                self._endpoints = {
                    "authorizationEndpoint": str(found["authorization_endpoint"]),
                    "tokenEndpoint": str(found["token_endpoint"]),
                }
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                raise Refused(f"cannot read the issuer's discovery document: {exc}", 503) from None
        return dict(self._endpoints)


class Verifiers:
    """Every verifier a server has; :meth:`verify` answers a request's principal or refuses."""

    def __init__(
        self,
        tokens: StaticTokens | None = None,
        jwt: JwtVerifier | None = None,
        custom: CustomVerifier | None = None,
        login: OidcLogin | None = None,
    ) -> None:
        self.tokens = tokens if tokens is not None and len(tokens) else None
        self.jwt, self.custom, self.login = jwt, custom, login

    def __bool__(self) -> bool:
        return bool(self.tokens or self.jwt or self.custom)

    def describe(self) -> str:
        """What verifies tokens here, for the server's first lines (names, never secrets)."""
        parts = []
        if self.tokens:
            parts.append(f"{len(self.tokens)} static token(s)")
        if self.jwt:
            parts.append(f"JWT ({', '.join(self.jwt.accepted)})")
        if self.custom:
            parts.append("a custom verifier")
        return ", ".join(parts) or "none"

    async def verify(self, request: AuthRequest) -> Principal:
        token = request.token
        if token is not None and self.tokens is not None:
            found = self.tokens.verify(token)
            if found is not None:
                return found
        if token is not None and self.jwt is not None and token.count(".") == 2:
            return await self.jwt.verify(token)
        if self.custom is not None:
            answer = self.custom(request)
            if inspect.isawaitable(answer):
                answer = await answer
            if isinstance(answer, Principal):
                return answer
            if answer is not None:
                raise TypeError(f"the custom verifier returned {type(answer).__name__}, "
                                "not a Principal or None")  # fmt: skip
        if token is None:
            raise Refused("missing bearer token: send 'Authorization: Bearer <token>'")
        raise Refused("bad bearer token")
