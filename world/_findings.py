"""What checking a store finds: one `Finding` per stored object (`World.verify`,
`world.verify`), in the same states whichever store it checks."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# States that need no action; every other state is a problem `repair` may fix.
OK_STATES = frozenset({"ok", "held"})
# Warnings: recovered on open or tidied by `repair` (`lost`: what an earlier repair
# replaced, reported; nothing left to do).
WARNING_STATES = frozenset({"torn", "stale", "leftover", "dangling", "lost"})
# Errors: `corrupt` and `unreadable` until repaired; `damaged` is what a repair leaves when the
# family cannot go on (no repair changes it).
ERROR_STATES = frozenset({"corrupt", "unreadable", "damaged"})


@dataclass(frozen=True)
class Finding:
    """The state of one file (or, after `repair`, what was done to it)."""

    path: str  # relative to the data directory
    kind: str  # format | journal | inbox | stream | index | head | record | lock | hook |
    #            temp
    state: str  # ok | held | torn | stale | leftover | dangling | lost | corrupt |
    #             unreadable | damaged | busy | repaired | quarantined
    detail: str = ""
    offset: int | None = None  # where the damage starts
    size: int = 0
    records: int = 0
    family: str | None = None  # the run family the file belongs to (None: the store's own)

    @property
    def ok(self) -> bool:
        return self.state in OK_STATES

    @property
    def error(self) -> bool:
        """Damage that is not recovered on open (a torn tail is; a corrupt record is not)."""
        return self.state in ERROR_STATES

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
