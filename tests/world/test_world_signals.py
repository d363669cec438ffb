"""`world._signals.wait_set`: the wait every tail and inbox wait of the memory and PostgreSQL
worlds makes for its wake-up."""

from __future__ import annotations

import asyncio

from world._signals import wait_set


def test_a_cancel_that_comes_as_the_event_is_set_goes_through() -> None:
    """A waiter cancelled after its event was set but before it resumed ends cancelled (3.11's
    `asyncio.wait_for` returned the event's result there instead: a tail cancelled as an item
    arrived went on waiting for the next, and `eve chat` never ended its turn)."""

    async def main() -> list[str]:
        seen = []
        for turns in range(3):
            event = asyncio.Event()
            waiter = asyncio.create_task(wait_set(event, 5))
            await asyncio.sleep(0)  # waiting
            event.set()
            for _ in range(turns):
                await asyncio.sleep(0)
            if waiter.done():
                seen.append("ended first")
                continue
            waiter.cancel()
            try:
                await waiter
            except asyncio.CancelledError:
                seen.append("cancelled")
            else:
                seen.append("swallowed")
        return seen

    seen = asyncio.run(main())
    assert "cancelled" in seen and "swallowed" not in seen, seen


def test_a_wait_says_whether_its_event_was_set() -> None:
    async def main() -> tuple[bool, bool, bool]:
        event = asyncio.Event()
        timed_out = await wait_set(event, 0.01)
        asyncio.get_running_loop().call_later(0.01, event.set)
        woken = await wait_set(event, 5)
        return timed_out, woken, await wait_set(event, 0)

    assert asyncio.run(main()) == (False, True, True)
