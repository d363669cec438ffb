"""A server's housekeeping: now and then, the data of sessions idle past an age is removed,
and a worker of a shared store advertises itself to its peers.

The work itself is a job the server is given (`ChannelSettings.retention`: `eve start` passes
one built on `eve_cli._retention`, the code `eve gc` runs), run on a thread at start-up and then
every `ChannelSettings.retention_every` seconds; it returns the line to log, if any. A failed
run is logged and tried again at the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

RetentionJob = Callable[[], str | None]


async def keep_retention(job: RetentionJob, every: float, log: Callable[[str], None]) -> None:
    """Run ``job`` now and every ``every`` seconds until cancelled."""
    while True:
        try:
            said = await asyncio.to_thread(job)
        except Exception as exc:  # the store away for a moment: the next run tries again
            said = f"retention: {type(exc).__name__}: {exc}"
        if said:
            log(said)
        await asyncio.sleep(every)


class Membership(Protocol):
    """The server's part in the fleet of workers sharing its store (`eve start` on
    PostgreSQL: `cli/_fleet.py`): said every ``every`` seconds, read by `GET /info`."""

    every: float

    def beat(self) -> None:
        """Advertise this worker in the store, now."""

    def peers(self) -> list[dict[str, object]]:
        """The live workers of the store, this one included (``self``: true)."""
        ...

    def leave(self) -> None:
        """Withdraw this worker (it stops)."""


async def advertise(member: Membership, log: Callable[[str], None]) -> None:
    """Advertise ``member`` now; a failure is logged (the next beat tries again)."""
    try:
        await asyncio.to_thread(member.beat)
    except Exception as exc:  # the store away, or replaced under the server
        log(f"fleet: {type(exc).__name__}: {exc}")


async def keep_membership(member: Membership, log: Callable[[str], None]) -> None:
    """Advertise ``member`` every ``member.every`` seconds (the first time: `advertise`,
    before the server serves) until cancelled; withdraw it then."""
    try:
        while True:
            await asyncio.sleep(member.every)
            await advertise(member, log)
    finally:
        with contextlib.suppress(Exception):  # gone with the store: its row expires then
            await asyncio.shield(asyncio.to_thread(member.leave))
