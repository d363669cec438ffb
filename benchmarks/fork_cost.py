"""What a fork costs (SPEC §15): bytes and time to fork a long conversation on the local world.

One session of ``TURNS`` turns on the scripted model (user messages ~200 characters, replies
~300, one tool call every turn, no compaction). A fork shares nothing with its original: it
copies the events and history as of its checkpoint and writes one journal record (the
generation the checkpoint is in) plus its head. So its size should be what it copies, not
what the original's journal holds.

* ``fork_cost.bytes``: bytes the fork of the latest checkpoint stores (``baseline``: the
  original's bytes; ``ratio`` < 1: the original's journal of every turn is not copied).
* ``fork_cost.vs_copied``: the fork's bytes against the stored bytes of the stream items it
  copies (ratio ≈ 1: proportional to what it must copy).
* ``fork_cost.half``: the fork at turn ``TURNS/2`` against the fork at the end (ratio ≈ 0.5).
* ``fork_cost.seconds``: median wall time of one fork at the latest checkpoint (5 forks).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import call, scratch, text, write_agent

USER_CHARS, REPLY_CHARS = 200, 300


def _conversation(root: Path, turns: int) -> Iterator[dict[str, Any]]:
    from eve_cli._session import events_stream, history_stream
    from eve_cli.runtime import Runtime

    rng = random.Random(3)
    script: list[dict[str, Any]] = []
    for _ in range(turns):
        script += [{"text": "", "tool_calls": [call("noop")]},
                   {"text": text(rng, REPLY_CHARS), "tool_calls": []}]  # fmt: skip
    agent = write_agent(root / "agent", script, context_window=10_000_000)
    rt = Runtime(data_dir=root / "data", agent_dir=agent)
    world = rt.world

    def stored(sid: str) -> int:
        return world.family_usage(sid).bytes

    async def main() -> Iterator[dict[str, Any]]:
        sid = await rt.create_session()
        await rt.drive(sid)
        for _ in range(turns):
            await rt.deliver(sid, text(rng, USER_CHARS))
            await rt.drive(sid)
        original = stored(sid)
        times, forks = [], []
        for _ in range(5):
            began = time.perf_counter()
            forks.append((await rt.fork(sid))["sessionId"])
            times.append(time.perf_counter() - began)
        latest = stored(forks[0])
        copied = world.family_usage(
            forks[0], streams=[events_stream(forks[0]), history_stream(forks[0])]
        ).bytes - _journal_and_head(world, forks[0])
        half = stored((await rt.fork(sid, str(turns // 2)))["sessionId"])
        return iter(
            [
                measurement("fork_cost.bytes", latest, "bytes", baseline=original, turns=turns),
                measurement("fork_cost.vs_copied", latest, "bytes", baseline=copied, turns=turns),
                measurement("fork_cost.half", half, "bytes", baseline=latest, turns=turns),
                measurement("fork_cost.seconds", statistics.median(times), "s", turns=turns),
            ]
        )

    try:
        yield from asyncio.run(main())
    finally:
        rt.close()


def _journal_and_head(world: Any, sid: str) -> int:
    """Bytes of the family's own files (journal, inbox, head): its usage without streams."""
    return int(world.family_usage(sid, streams=[]).bytes)


def run(quick: bool) -> Iterator[dict[str, Any]]:
    turns = 20 if quick else 1000
    with scratch("fork") as root:
        yield from _conversation(root, turns)
