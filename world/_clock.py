"""The clock of this process, which a world's clock (`World.now`) starts from.

Everything durable that says *when* (a record's time, a sleep's wake time, a delivery's time,
a schedule's tick) is read from the world's clock, never from `time.time()` directly: a world
that many machines share (PostgreSQL) corrects this clock by its offset to the database's, so
workers whose clocks disagree still agree on when a timer is due.

`EVE_TEST_CLOCK_SKEW=SECONDS` (tests only: a worker with a wrong clock) shifts this process's
clock by SECONDS; it is read once at import and costs nothing when unset.
"""

from __future__ import annotations

import os
import time


def _skew() -> float:
    text = os.environ.get("EVE_TEST_CLOCK_SKEW", "").strip()
    if not text:
        return 0.0
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"EVE_TEST_CLOCK_SKEW: {text!r} is not a number of seconds") from None


SKEW = _skew()


def local_now() -> float:
    """This process's clock: seconds since the epoch (`time.time()`, shifted by the test
    hook's `EVE_TEST_CLOCK_SKEW`)."""
    return time.time() + SKEW if SKEW else time.time()
