"""Who is speaking: a :class:`Principal` per request, its scopes, and what it may own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eve_cli._json import JSONObject

# What a principal may do (SPEC §18). `admin` implies every other scope and every session.
READ, SEND, APPROVE, ADMIN = "read", "send", "approve", "admin"
SCOPES = (READ, SEND, APPROVE, ADMIN)


class Refused(Exception):
    """A verifier's refusal: ``str()`` is one line for the caller (never the token), ``status``
    the HTTP answer (401: who are you; 403: not allowed; 503: cannot tell now)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Principal:
    """The verified caller of one request: ``subject`` (a user or service id), an optional
    ``tenant`` (sessions are then shared by the tenant), its ``scopes``, and ``claims`` kept
    for tools (``ctx.principal``), never a token."""

    subject: str
    tenant: str | None = None
    scopes: frozenset[str] = frozenset()
    claims: JSONObject = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.subject, str) or not self.subject:
            raise ValueError("a principal needs a non-empty subject")
        object.__setattr__(self, "scopes", frozenset(self.scopes))

    def may(self, scope: str) -> bool:
        """True when the principal holds ``scope`` (``admin`` holds them all)."""
        return scope in self.scopes or ADMIN in self.scopes

    @property
    def record(self) -> dict[str, str]:
        """How the principal is recorded: a session's ``owner`` (its meta) and the ``by`` of
        what it asks (events): its subject and tenant, nothing else."""
        return {"subject": self.subject, **({"tenant": self.tenant} if self.tenant else {})}

    def owns(self, owner: Any) -> bool:
        """True when a session with ``owner`` (its meta's record; None: made without
        principals) is this principal's: its own, its tenant's, or any for ``admin``."""
        if ADMIN in self.scopes:
            return True
        if not isinstance(owner, dict):
            return False
        tenant = owner.get("tenant")
        if tenant is not None:
            return bool(tenant == self.tenant)
        return bool(owner.get("subject") == self.subject)


# The server's own token (`--token`, EVE_AUTH_TOKEN): every scope, every session.
OPERATOR = Principal("operator", scopes=frozenset(SCOPES))
# Serving without any verifier (a loopback server with no token): the person at this machine.
LOCAL = Principal("local", scopes=frozenset(SCOPES))
