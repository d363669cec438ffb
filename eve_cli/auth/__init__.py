"""Who is speaking (SPEC §18): principals, their scopes, and the verifiers that make them.

A request's bearer token becomes a :class:`Principal` (subject, optional tenant, scopes
``read``/``send``/``approve``/``admin``) through the server's verifiers: static tokens (held
as digests), JWTs checked with PyJWT against a JWKS file, URL or OIDC issuer, and a custom
verifier of the agent folder's ``auth.py``. The channel (`eve_cli.channel`) runs them on every
route; this package knows nothing of HTTP routes or sessions.
"""

from eve_cli.auth._chain import AuthRequest, OidcLogin, Verifiers
from eve_cli.auth._config import AuthSettings, define_auth, load_auth
from eve_cli.auth._principal import (
    ADMIN,
    APPROVE,
    LOCAL,
    OPERATOR,
    READ,
    SCOPES,
    SEND,
    Principal,
    Refused,
)
from eve_cli.auth._static import StaticTokens, digest

__all__ = [
    "ADMIN",
    "APPROVE",
    "LOCAL",
    "OPERATOR",
    "READ",
    "SCOPES",
    "SEND",
    "AuthRequest",
    "AuthSettings",
    "OidcLogin",
    "Principal",
    "Refused",
    "StaticTokens",
    "Verifiers",
    "define_auth",
    "digest",
    "load_auth",
]
