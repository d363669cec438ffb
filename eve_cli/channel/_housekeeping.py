"""A server's retention: now and then, the data of sessions idle past an age is removed.

The work itself is a job the server is given (`ChannelSettings.retention`: `eve start` passes
one built on `eve_cli._retention`, the code `eve gc` runs), run on a thread at start-up and then
every `ChannelSettings.retention_every` seconds; it returns the line to log, if any. A failed
run is logged and tried again at the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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
