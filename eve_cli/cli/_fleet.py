"""A worker's place in the fleet sharing its store (SPEC §17: workers of one store share one
store id).

A worker of a shared store (PostgreSQL) advertises itself in it while it serves (`world.Presence`:
its id, host, pid, eve version, agent and the store id it joined), and remembers the store it
joined in its agent folder (`.eve/store`: the id and the redacted URL, not a secret). At start it
refuses, in one line, a store whose id differs from what a live peer advertises (the database was
replaced or restored under a running fleet) or from the one its deployment last joined (pointed
at another database), unless told which store to join (`--store-id`); and a deployment that
joined a store makes no new one in a database that has none.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from eve_cli._version import __version__
from eve_cli.cli._errors import CliError
from world import Presence

EVERY = 2.0  # seconds between a worker's advertisements
LIVE = 10.0  # a worker not heard of for longer is taken for gone
JOINED = Path(".eve") / "store"  # in the agent folder: the store its deployment last joined


@dataclass
class Fleet:
    """This worker among those advertising in ``presence`` (a `world.Presence`), store
    ``store_id`` at ``where`` (redacted); ``remember``: the agent folder keeping the store
    joined (None: the built-in agent, nothing to keep)."""

    presence: Presence
    store_id: str
    where: str
    agent: str
    remember: Path | None
    every: float = EVERY
    worker: str = field(default_factory=lambda: secrets.token_hex(6))

    def check(self, pinned: str | None) -> None:
        """Refuse (`CliError`) to join a store live peers or the last join say is another,
        unless ``pinned`` (`--store-id`) names this one (then joining it is what was asked)."""
        if pinned is not None:
            return  # checked against the store already (`serve._store_of`)
        told = f"pass --store-id {self.store_id} to join it"
        others = sorted({str(m["storeId"]) for m in self._live() if m.get("storeId") not in (
            None, self.store_id)})  # fmt: skip
        if others:
            raise CliError(
                f"live workers of {self.where} advertise store {', '.join(others)}, but it is "
                f"now store {self.store_id} (replaced or restored under them?): not joining; "
                f"{told}"
            )
        last = self._joined()
        if last is not None and last.get("storeId") != self.store_id:
            raise CliError(
                f"this deployment (agent folder {self.remember}) last joined store "
                f"{last.get('storeId')} ({last.get('where')}); {self.where} is store "
                f"{self.store_id}: not joining another store; {told}"
            )

    def joined(self, log: Callable[[str], None]) -> None:
        """Remember the store joined in the agent folder (a folder that cannot be written:
        nothing is remembered, said once)."""
        if self.remember is None:
            return
        path = self.remember / JOINED
        text = json.dumps({"storeId": self.store_id, "where": self.where}) + "\n"
        try:
            if path.exists() and path.read_text(encoding="utf-8") == text:
                return
            path.parent.mkdir(exist_ok=True)
            ignore = path.parent / ".gitignore"  # this host's, not the agent's code: never
            if not ignore.exists():  # committed, so a clone deployed elsewhere brings none
                ignore.write_text("# written by eve: this host's state\n*\n", encoding="utf-8")
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        except OSError as exc:
            log(f"fleet: cannot remember the store joined in {path}: {exc.strerror or exc}")

    def beat(self) -> None:
        self.presence.advertise(self.worker, self._facts())

    def peers(self) -> list[dict[str, object]]:
        now = time.time()
        out = []
        for member in self.presence.members(LIVE):
            seen = datetime.fromtimestamp(now - member.seen_ago, UTC)
            out.append({**member.facts, "lastSeen": seen.isoformat(timespec="seconds"),
                        "self": member.id == self.worker})  # fmt: skip
        return out

    def leave(self) -> None:
        self.presence.withdraw(self.worker)

    def _facts(self) -> dict[str, object]:
        return {"worker": self.worker, "host": socket.gethostname(), "pid": os.getpid(),
                "version": __version__, "storeId": self.store_id, "agent": self.agent}  # fmt: skip

    def _live(self) -> list[dict[str, object]]:
        return [dict(m.facts) for m in self.presence.members(LIVE)]

    def _joined(self) -> dict[str, object] | None:
        return joined_store(self.remember)


def joined_store(folder: Path | None) -> dict[str, object] | None:
    """What the agent folder ``folder`` remembers of the store its deployment last joined
    (``storeId``, ``where``); None: nothing (never joined, or no folder of its own)."""
    if folder is None:
        return None
    try:
        found = json.loads((folder / JOINED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # never joined (or the file damaged: it is written again)
    return found if isinstance(found, dict) else None


def refuse_a_new_store(folder: Path | None, where: str, pinned: str | None) -> None:
    """Refuse (`CliError`) to make a store at ``where`` (none is there) for a deployment that
    joined another, unless ``pinned`` (`--store-id`) says which store to serve."""
    last = joined_store(folder)
    if folder is None or last is None or pinned is not None:
        return
    raise CliError(
        f"this deployment (agent folder {folder}) last joined store {last.get('storeId')} "
        f"({last.get('where')}); {where} has no eve store: not making one there (remove "
        f"{folder / JOINED} to start a new store)"
    )
