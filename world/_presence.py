"""Who uses a shared store: each member (a process serving it) advertises itself now and then,
and any member reads the others. The world keeps what a member says of itself (`facts`) without
reading it: what a member is, and what to make of the others, is its own business."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Member:
    """A member as last advertised: its id, its facts, and how long ago it said them
    (seconds, by the store's clock)."""

    id: str
    facts: Mapping[str, object]
    seen_ago: float


@runtime_checkable
class Presence(Protocol):
    """A store its users advertise themselves in (`PostgresWorld`; a directory has none)."""

    def advertise(self, member: str, facts: Mapping[str, object]) -> None:
        """Say that ``member`` is here, with ``facts`` (JSON values), now."""
        ...

    def members(self, within: float) -> list[Member]:
        """The members that advertised in the last ``within`` seconds, most recent first."""
        ...

    def withdraw(self, member: str) -> None:
        """Forget ``member`` (it leaves)."""
        ...
