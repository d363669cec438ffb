"""Whose sessions (SPEC §18): a session belongs to the principal (or tenant) that created it,
recorded in its meta (``owner``) when it is created, so every worker and every restart reads
the same. Its owner and ``admin`` principals may read and act on it; anyone else is told it
does not exist (404, as for an unknown id: no probing for ids)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from eve_cli._facade import By, ServingFacade
from eve_cli.auth import ADMIN, APPROVE, LOCAL, OPERATOR, SEND, Principal

# The principal of a request on an open path: it may do nothing (a route opened by mistake
# gives no powers).
ANONYMOUS = Principal("anonymous")


def principal_of(scope: Mapping[str, Any]) -> Principal:
    """The principal the channel's `AuthGate` made for this request (an ASGI scope; its
    ``state``), :data:`ANONYMOUS` if none."""
    found = scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else ANONYMOUS


Row = TypeVar("Row", bound=Mapping[str, Any])  # a listing's row


class NotOwned(LookupError):
    """The session is not the principal's (told as "does not exist")."""


class Owners:
    """Reads and keeps sessions' owners; answers who may see which session."""

    def __init__(self, runtime: ServingFacade) -> None:
        self.runtime = runtime

    async def check(self, principal: Principal, sid: str) -> None:
        """Raise :class:`NotOwned` unless ``principal`` may see session ``sid`` (a sub-agent's
        session is its root's); an unknown session raises the runtime's not-found error.
        The owner is read from the session's meta (kept by the runtime: no store read)."""
        if ADMIN in principal.scopes:
            return
        owner = await self.runtime.call(self.runtime.owner, sid.split(".", 1)[0])
        if not principal.owns(owner):
            raise NotOwned(sid)

    async def visible_ids(self, principal: Principal, sids: list[str]) -> list[str]:
        """The sessions of ``sids`` ``principal`` may see (gone ones left out)."""
        out = []
        for sid in sids:
            with contextlib.suppress(NotOwned, LookupError):
                await self.check(principal, sid)
                out.append(sid)
        return out

    @staticmethod
    def visible(principal: Principal, rows: list[Row]) -> list[Row]:
        """The listing's rows ``principal`` may see."""
        if ADMIN in principal.scopes:
            return rows
        return [row for row in rows if principal.owns(row.get("owner"))]

    @staticmethod
    def meta(principal: Principal) -> dict[str, By] | None:
        """What a session ``principal`` creates keeps in its meta (None for the loopback
        server's one person: no owner is recorded)."""
        return None if principal is LOCAL else {"owner": principal.record}

    @staticmethod
    def by(principal: Principal) -> By | None:
        """How ``principal`` is recorded in the events it causes (None: the loopback server's
        one person, not recorded)."""
        return None if principal is LOCAL else principal.record

    @staticmethod
    def operation_id(principal: Principal, operation_id: str | None) -> str | None:
        """The operation id as stored: each owner's ids are its own (another user's same id
        is another session); the server's own principals keep the id as given."""
        if operation_id is None or principal in (LOCAL, OPERATOR):
            return operation_id
        who = f"t:{principal.tenant}" if principal.tenant else f"u:{principal.subject}"
        return f"{who}:{operation_id}"


def answer_scope(
    pending: Sequence[Mapping[str, Any]], responses: Sequence[Mapping[str, Any]]
) -> str:
    """The scope answering ``responses`` needs: ``approve`` for any answer to an approval or
    an interrupted call's outcome (anything but a question), else ``send``."""
    kinds = {str(p.get("requestId")): p.get("kind") for p in pending}
    asked = (kinds.get(str(r.get("requestId"))) for r in responses)
    return APPROVE if any(kind != "question" for kind in asked) else SEND
