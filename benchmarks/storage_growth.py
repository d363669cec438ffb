"""Storage against conversation length: is it linear, and how far above the history itself?

Two sessions on the scripted model hold conversations of ``SMALL`` and ``LARGE`` turns; each
user message is ~200 characters, each reply ~300 (no tool calls). The agent's context window is
large enough that no compaction happens, so the final history holds every message.

* ``storage_growth.bytes``: bytes on disk of the large conversation (``baseline``: the small
  one); ``ratio`` must stay ≤ 11 for linear growth (SPEC §11).
* ``storage_growth.files``: files in the data directory, large vs small (constant: files grow
  with sessions, not turns).
* ``storage_growth.vs_raw``: bytes on disk of the large conversation against the raw msgpack
  size of its final history (SPEC §11: ≤ 3×).
* ``storage_growth.per_turn``: bytes on disk per turn of the large conversation.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from . import measurement
from ._support import disk_usage, scratch, text, write_agent

USER_CHARS, REPLY_CHARS = 200, 300


def converse(root: Path, turns: int, seed: int = 1) -> tuple[int, int, int]:
    """Run a conversation of ``turns`` turns in its own data directory; return its bytes on
    disk, its file count and the raw msgpack size of the session's final history."""
    from eve_cli.runtime import Runtime

    rng = random.Random(seed)
    script = [{"text": text(rng, REPLY_CHARS), "tool_calls": []} for _ in range(turns)]
    agent = write_agent(root / "agent", script, context_window=10_000_000)
    data = root / "data"
    rt = Runtime(data_dir=data, agent_dir=agent)

    async def main() -> list[dict[str, Any]]:
        sid = await rt.create_session()
        await rt.drive(sid)
        for _ in range(turns):
            await rt.deliver(sid, text(rng, USER_CHARS))
            await rt.drive(sid)
        view = rt.session(sid)
        if view["status"] != "waiting" or view.get("turnCount") != turns:
            raise RuntimeError(f"conversation ended {view['status']} after {view['turns']}")
        return rt.history(sid)

    try:
        history = asyncio.run(main())
    finally:
        rt.close()
    if len(history) != 2 * turns:
        raise RuntimeError(f"expected {2 * turns} messages in the history, found {len(history)}")
    raw = len(msgpack.packb(history, use_bin_type=True))
    size, files = disk_usage(data)
    return size, files, raw


def run(quick: bool) -> Iterator[dict[str, Any]]:
    small, large = (3, 30) if quick else (100, 1000)
    with scratch("storage") as root:
        small_bytes, small_files, _ = converse(root / "small", small)
        large_bytes, large_files, raw = converse(root / "large", large)
    turns = [small, large]
    yield measurement("storage_growth.bytes", large_bytes, "bytes", baseline=small_bytes,
                      turns=turns)  # fmt: skip
    yield measurement("storage_growth.files", large_files, "files", baseline=small_files,
                      turns=turns)  # fmt: skip
    yield measurement("storage_growth.vs_raw", large_bytes, "bytes", baseline=raw, turns=large)
    yield measurement("storage_growth.per_turn", large_bytes / large, "bytes/turn")
