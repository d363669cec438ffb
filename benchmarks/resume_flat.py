"""Resume time against session age: reopening an old session must cost what a young one does.

Two sessions on the scripted model are built with ``SMALL`` and ``LARGE`` completed turns (user
message ~200 characters, reply ~300; the agent's default context window, so the long one
compacts as a real one would). Then, in rounds, a fresh ``Runtime`` opens each data directory,
delivers a message and drives the session until that turn is done (one step, one model call):
the time from opening to the session being ready again.

* ``resume_flat.turn``: seconds from opening the LARGE session to its next turn done
  (``baseline``: the SMALL one); SPEC §11: ratio ≤ 2.
* ``resume_flat.open``: seconds from opening to the first model call of that turn
  (``baseline``: the SMALL one): what resuming costs before any new work.
* ``resume_flat.view``: seconds for the session view afterwards (``rt.session``, what
  ``drive()`` returns by default: its latest 20 turns and their count) in that fresh process:
  from the session's latest fold checkpoint plus the events after it (SPEC §11: ratio ≤ 2).

The fixture sessions are built with fsync off and without folding the view after each turn
(building 2,000 turns would otherwise take many minutes); what is measured runs as usual.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import measurement
from ._support import median, no_fsync, scratch, text, write_agent

USER_CHARS, REPLY_CHARS = 200, 300


class _Clock:
    """Notes when the scripted model is first called (the session is ready for a step)."""

    first_call: float | None = None


def build(
    root: Path, turns: int, rounds: int, seed: int = 1, world: str | None = None
) -> tuple[Path, Path, str]:
    """(agent folder, data directory, session id) of a session of ``turns`` completed turns
    (``world``: a PostgreSQL URL to build it in instead of a data directory)."""
    from eve_cli.runtime import Runtime

    rng = random.Random(seed)
    script = [{"text": text(rng, REPLY_CHARS), "tool_calls": []} for _ in range(turns + rounds)]
    agent = write_agent(root / "agent", script)
    data = root / "data"
    rt = Runtime(data_dir=world or data, agent_dir=agent)

    async def main() -> str:
        # engine.run, not drive: drive also folds the whole session view after each turn,
        # which would make building the fixture quadratic in its turns.
        sid = await rt.create_session()
        await rt.engine.run(sid)
        for _ in range(turns):
            await rt.deliver(sid, text(rng, USER_CHARS))
            await rt.engine.run(sid)
        view = rt.session(sid)
        if view["status"] != "waiting" or view.get("turnCount") != turns:
            raise RuntimeError(f"building {turns} turns ended {view['status']}")
        return sid

    try:
        with no_fsync():  # a fixture: 2,000 turns of fsyncs would take minutes
            sid = asyncio.run(main())
    finally:
        rt.close()
    return agent, data, sid


def reopen(agent: Path, data: Path, sid: str, message: str) -> tuple[float, float, float]:
    """(seconds to the next turn done, seconds to its model call) from a fresh Runtime, and
    the seconds the whole session view takes then."""
    from eve_cli.models import scripted
    from eve_cli.runtime import Runtime

    clock = _Clock()
    original = scripted.ScriptedModel.generate

    async def timed(self: Any, request: Any, on_delta: Any = None, on_reasoning: Any = None) -> Any:
        if clock.first_call is None:
            clock.first_call = time.perf_counter()
        return await original(self, request, on_delta, on_reasoning)

    async def main() -> tuple[float, float, float]:
        started = time.perf_counter()
        rt = Runtime(data_dir=data, agent_dir=agent)
        try:
            await rt.deliver(sid, message)
            status = (await rt.drive(sid, view=False))["status"]
            done = time.perf_counter()
            view = rt.session(sid)
            viewed = time.perf_counter() - done
        finally:
            rt.close()
        if status != "waiting" or view["status"] != "waiting":
            raise RuntimeError(f"resumed session is {status}, not waiting")
        return started, done, viewed

    scripted.ScriptedModel.generate = timed  # type: ignore[method-assign]
    try:
        started, done, viewed = asyncio.run(main())
    finally:
        scripted.ScriptedModel.generate = original  # type: ignore[method-assign]
    first = clock.first_call if clock.first_call is not None else done
    return done - started, first - started, viewed


def run(quick: bool) -> Iterator[dict[str, Any]]:
    small, large = (3, 30) if quick else (20, 2000)
    rounds = 2 if quick else 9
    with scratch("resume") as root:
        built = [build(root / "small", small, rounds), build(root / "large", large, rounds)]
        rng = random.Random(2)
        times: list[list[tuple[float, float, float]]] = [[], []]
        for _ in range(rounds):  # alternate, so disk noise hits both alike
            for i, (agent, data, sid) in enumerate(built):
                times[i].append(reopen(agent, data, sid, text(rng, USER_CHARS)))
    turn = [median([t[0] for t in ts]) for ts in times]
    ready = [median([t[1] for t in ts]) for ts in times]
    view = [median([t[2] for t in ts]) for ts in times]
    sizes = [small, large]
    yield measurement("resume_flat.turn", turn[1], "s", baseline=turn[0], turns=sizes)
    yield measurement("resume_flat.open", ready[1], "s", baseline=ready[0], turns=sizes)
    yield measurement("resume_flat.view", view[1], "s", baseline=view[0], turns=sizes)
