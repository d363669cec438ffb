"""Conformance: forking a run family at a checkpoint (`Engine.fork`, `World.fork_family`).

The workflows count every step function they run (`RAN`), so a test sees that a fork replays
what was recorded before its checkpoint without running it again, and runs what follows live,
in the fork alone.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from tests.worlds import WorldOpener
from world import (
    Engine,
    ForkError,
    RunExistsError,
    WorkflowContext,
    World,
)

TOKEN = "ab" * 16  # a hex token, as eve's sessions have


class Session:
    """A driver (one turn per generation, a child run each) whose steps append to its stream."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ran: Counter[str] = Counter()
        self.marks: dict[str, tuple[int, int]] = {}  # label -> (checkpoint, stream length)
        self.engine = Engine(world, {"driver": self.driver, "turn": self.turn})

    def mark(self, ctx: WorkflowContext, label: str) -> None:
        at = ctx.checkpoint()
        if at is not None:
            self.marks[label] = (at, self.world.stream_length(f"events.{ctx.run_id.split('.')[0]}"))

    def work(self, root: str, name: str) -> str:
        self.ran[f"{root}:{name}"] += 1
        self.world.stream_append(f"events.{root}", name)
        return name.upper()

    async def turn(self, ctx: WorkflowContext, message: str) -> list[str]:
        root = ctx.run_id.split(".")[0]
        a = await ctx.step("a", self.work, root, f"a-{message}")
        self.mark(ctx, f"after-a-{message}")
        b = await ctx.step("b", self.work, root, f"b-{message}")
        return [message, a, b]

    async def driver(self, ctx: WorkflowContext, data: dict[str, Any]) -> Any:
        token = ctx.meta["token"]
        hook = ctx.create_hook(token) if ctx.generation == 0 else ctx.hook(token)
        self.mark(ctx, f"wait-{len(data['turns'])}")
        message = await hook.receive()
        result = await ctx.run_child("turn", message)
        ctx.continue_as_new({"turns": [*data["turns"], result]})

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    def start(self, root: str) -> None:
        async def go() -> None:
            await self.engine.start("driver", {"turns": []}, run_id=root, meta={"token": TOKEN})
            assert (await self.engine.run(root)).status == "parked"

        self.run(go())

    def say(self, root: str, token: str, message: str) -> str:
        async def go() -> str:
            await self.engine.resume_hook(token, message)
            return (await self.engine.run(root)).status

        return str(self.run(go()))

    def turns(self, root: str) -> Any:
        return self.engine.info(root).meta, self._input(root)

    def _input(self, root: str) -> Any:
        gens = [r for r in self.engine.history(root) if r["t"] in ("start", "gen")]
        return gens[-1]["input"]["turns"]


def _fork(s: Session, source: str, target: str, label: str | None) -> dict[str, str]:
    at, length = s.marks[label] if label else (None, s.world.stream_length(f"events.{source}"))
    plan = s.run(s.engine.fork(source, target, at=at, streams={f"events.{source}": length}))
    assert plan.root == target
    return dict(plan.tokens)


def test_a_fork_mid_run_replays_what_was_recorded_and_runs_the_rest_in_the_fork(
    world: World,
) -> None:
    s = Session(world)
    s.start("src")
    assert s.say("src", TOKEN, "one") == "parked"
    before = world.stream_read("events.src")
    tokens = _fork(s, "src", "dup", "after-a-one")
    fork_token = tokens[TOKEN]
    assert fork_token != TOKEN and len(fork_token) == len(TOKEN)
    assert world.stream_read("events.dup") == ["a-one"]  # as of the checkpoint
    assert s.engine.info("dup").meta == {"token": fork_token}
    assert s.run(s.engine.run("dup")).status == "parked"
    # Step a ran once (its result came from the journal in the fork), b ran again live.
    assert s.ran == Counter({"src:a-one": 1, "src:b-one": 1, "dup:b-one": 1})
    assert world.stream_read("events.dup") == ["a-one", "b-one"]
    assert s._input("dup") == [["one", "A-ONE", "B-ONE"]]
    # The original is untouched and goes on by itself; each answers its own token only.
    assert world.stream_read("events.src") == before
    assert s.say("dup", fork_token, "two") == "parked"
    assert s.say("src", TOKEN, "deux") == "parked"
    assert s._input("dup")[-1] == ["two", "A-TWO", "B-TWO"]
    assert s._input("src")[-1] == ["deux", "A-DEUX", "B-DEUX"]
    assert world.stream_read("events.src") == [*before, "a-deux", "b-deux"]
    assert world.stream_read("events.dup") == ["a-one", "b-one", "a-two", "b-two"]
    assert world.hook_owner(TOKEN) == "src" and world.hook_owner(fork_token) == "dup"


def test_a_fork_of_a_parked_family_waits_for_the_same_and_is_answered_on_its_own(
    world: World,
) -> None:
    s = Session(world)
    s.start("src")
    s.say("src", TOKEN, "one")
    tokens = _fork(s, "src", "dup", None)  # the latest record: parked on the hook
    assert s.engine.info("dup").status == "parked"
    assert s.engine.info("dup").waiting == {"hook": tokens[TOKEN]}
    ran = Counter(s.ran)
    assert s.say("dup", tokens[TOKEN], "two") == "parked"
    assert s.ran - ran == Counter({"dup:a-two": 1, "dup:b-two": 1})
    assert s.engine.info("src").status == "parked" and s._input("src") == s._input("dup")[:1]


def test_a_fork_at_a_generation_start_copies_one_record(world: World) -> None:
    s = Session(world)
    s.start("src")
    for word in ("one", "two", "three"):
        s.say("src", TOKEN, word)
    at = s.marks["wait-1"][0]
    assert [(g, pos == at) for pos, g, _ in s.engine.generations("src")][:2] == [
        (0, False), (1, True),
    ]  # fmt: skip
    fork = s.engine.fork("src", "dup", at=at, streams={"events.src": 2}, aliases={"one": "uno"})
    plan = s.run(fork)
    assert len(plan.bodies) == 1  # the generation's start: nothing of the turns before
    assert s.run(s.engine.run("dup")).status == "parked"
    assert s._input("dup") == [["uno", "A-ONE", "B-ONE"]]  # an alias replaced in the data
    assert s.say("dup", plan.tokens[TOKEN], "autre") == "parked"
    assert s._input("dup")[-1] == ["autre", "A-AUTRE", "B-AUTRE"]
    assert world.stream_read("events.dup") == ["a-one", "b-one", "a-autre", "b-autre"]


def test_a_family_driven_elsewhere_can_be_forked_without_its_lease(
    open_world: WorldOpener,
) -> None:
    owner, other = open_world(), open_world()
    s = Session(owner)
    s.start("src")
    s.say("src", TOKEN, "one")
    lease = owner.acquire("src")  # as a process driving it holds it
    try:
        forker = Session(other)
        plan = forker.run(forker.engine.fork("src", "dup", streams={"events.src": 2}))
        assert other.stream_read("events.dup") == ["a-one", "b-one"]
    finally:
        lease.release()
    assert forker.say("dup", plan.tokens[TOKEN], "two") == "parked"
    assert forker.ran == Counter({"dup:a-two": 1, "dup:b-two": 1})


def test_a_fork_is_refused_clearly(world: World) -> None:
    s = Session(world)
    s.start("src")
    s.say("src", TOKEN, "one")
    with pytest.raises(ForkError, match="no record at position 999999"):
        s.run(s.engine.fork("src", "dup", at=999999))
    with pytest.raises(ForkError, match="holds 2 items, the checkpoint needs 5"):
        s.run(s.engine.fork("src", "dup", streams={"events.src": 5}))
    with pytest.raises(RunExistsError):
        s.run(s.engine.fork("src", "src"))
    assert not world.heads(roots=["dup"])
