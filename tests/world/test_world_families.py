"""Conformance: what a world tells about its families and streams, and removing a family."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.worlds import WorldOpener
from world import (
    Engine,
    FamilyHead,
    RunNotFoundError,
    WorkflowContext,
    World,
    stream_family,
)


def _start(world: World, root: str) -> Engine:
    """A family `root` whose run wrote a stream item and parked on hook `tok-<root>`."""

    async def parks(ctx: WorkflowContext, token: str) -> Any:
        await ctx.step("emit", world.stream_append, f"events.{ctx.run_id}", {"hello": token})
        hook = ctx.create_hook(token)
        return await hook.receive()

    engine = Engine(world, {"parks": parks})

    async def go() -> None:
        await engine.start("parks", f"tok-{root}", run_id=root)
        assert (await engine.run(root)).status == "parked"

    asyncio.run(go())
    return engine


def test_a_stream_belongs_to_the_family_its_second_name_part_names() -> None:
    assert stream_family("events.s_1") == "s_1"
    assert stream_family("history.s_1.2.3") == "s_1"
    assert stream_family("events") is None and stream_family("x.bad/name") is None


def test_heads_give_every_family_its_head_and_inbox_mark(world: World) -> None:
    assert world.heads() == []
    for root in ("b", "a"):
        _start(world, root)
    world.deliver("a", "tok-a", {"n": 1})
    heads = world.heads()
    assert [h.root for h in heads] == ["a", "b"]
    for h in heads:
        assert isinstance(h, FamilyHead) and [h] == world.heads(roots=[h.root])
        assert h.inbox_end == world.inbox_end(h.root)
    assert heads[0].inbox_end != heads[0].head["inbox_mark"]  # type: ignore[index]
    assert heads[1].inbox_end == heads[1].head["inbox_mark"]  # type: ignore[index]
    bare = world.heads(inbox=False)  # the marks may be left out, nothing else
    assert [(h.root, h.head) for h in bare] == [(h.root, h.head) for h in heads]
    assert all(h.inbox_end in (-1, world.inbox_end(h.root)) for h in bare)


def test_a_stream_version_changes_with_every_append_and_only_then(world: World) -> None:
    assert world.stream_versions(["events.s_1"]) == [None]
    world.stream_append("events.s_1", 1)
    [first] = world.stream_versions(["events.s_1"])
    assert first is not None and world.stream_versions(["events.s_1"]) == [first]
    time.sleep(0.01)  # a coarse clock must still see the change
    world.stream_append("events.s_1", 2)
    both = world.stream_versions(["events.s_1", "events.s_2"])
    assert both[0] != first and both[1] is None


def test_family_usage_counts_what_the_family_stores(world: World) -> None:
    assert world.family_usage("none").bytes == 0
    _start(world, "a")
    before = world.family_usage("a")
    assert before.bytes > 0 and 0 < before.last_write <= time.time() + 1
    time.sleep(0.02)
    world.stream_append("events.a", "x" * 1000)
    after = world.family_usage("a")
    assert after.bytes >= before.bytes + 1000 and after.last_write >= before.last_write
    only_journal = world.family_usage("a", streams=[])
    assert only_journal.bytes < after.bytes - 1000
    assert world.family_usage("a", streams=["events.a"]).bytes == after.bytes


def test_a_delivery_is_the_latest_write_of_an_idle_family(world: World) -> None:
    """What `eve gc` compares with its cutoff: a message delivered to a family nobody drove
    since is its latest stored change, as a record or a head written then would be."""
    _start(world, "a")
    before = world.family_usage("a").last_write
    time.sleep(0.2)
    world.deliver("a", "other", {"n": 1})
    assert world.family_usage("a").last_write >= before + 0.15


def test_family_streams_and_remnants(world: World) -> None:
    _start(world, "a")
    world.stream_append("history.a.1", 1)
    world.stream_append("events.gone", 1)  # a stream whose family is not there
    world.stream_append("other", 1)  # belongs to no family
    assert world.stream_names(family="a") == ["events.a", "history.a.1"]
    assert "other" in world.stream_names() and "events.a" in world.stream_names()
    assert world.remnants() == ["gone"]
    assert world.remove_family("gone")
    assert world.remnants() == [] and world.stream_names() == ["events.a", "history.a.1", "other"]


def test_a_familys_streams_are_its_own_however_often_they_are_asked_for(world: World) -> None:
    # One root inside another's id and inside a family-less stream's name; asked for more
    # times than a local world looks names up one by one before it groups them all.
    for root in ("a", "ab"):
        _start(world, root)
    world.stream_append("history.a.1", 1)
    world.stream_append("forks:a", 1)  # belongs to no family
    mine = ["events.a", "history.a.1"]
    for _ in range(12):
        assert world.stream_names(family="a") == mine
        assert world.stream_names(family="ab") == ["events.ab"]
    world.stream_append("tools.a", 1)
    assert world.stream_names(family="a") == [*mine, "tools.a"]
    assert world.remove_family("ab")
    assert world.stream_names(family="a") == [*mine, "tools.a"]
    assert world.stream_names(family="ab") == []


def test_removing_a_family_takes_its_streams_and_hooks_and_leaves_the_others(
    world: World,
) -> None:
    for root in ("a", "b"):
        _start(world, root)
    assert world.hook_owner("tok-a") == "a"
    with world.acquire("a"):
        assert world.remove_family("a", inbox_mark=world.inbox_end("a"))
    assert not world.heads(roots=["a"]) and world.families() == ["b"]
    assert world.hook_owner("tok-a") is None and world.hook_owner("tok-b") == "b"
    assert world.stream_names(family="a") == [] and world.stream_read("events.a") == []
    assert world.stream_read("events.b") == [{"hello": "tok-b"}]
    assert world.remnants() == [] and world.family_usage("a").bytes == 0
    with pytest.raises(RunNotFoundError):
        world.deliver("a", "tok-a", 1)
    with pytest.raises(RunNotFoundError):
        world.acquire("a")
    # A family made again under the same id starts empty.
    _start(world, "a")
    assert world.stream_read("events.a") == [{"hello": "tok-a"}]


def test_a_family_delivered_to_after_the_decision_is_not_removed(world: World) -> None:
    _start(world, "a")
    with world.acquire("a"):
        mark = world.inbox_end("a")
        world.deliver("a", "tok-a", {"late": True})  # after the caller decided
        assert not world.remove_family("a", inbox_mark=mark)
    assert bool(world.heads(roots=["a"])) and world.hook_owner("tok-a") == "a"
    assert world.read_inbox("a")[0][-1].payload == {"late": True}
    assert world.stream_read("events.a") == [{"hello": "tok-a"}]


def test_another_opener_sees_a_removal(open_world: WorldOpener) -> None:
    world, other = open_world(), open_world()
    _start(world, "a")
    assert bool(other.heads(roots=["a"])) and other.stream_length("events.a") == 1
    with world.acquire("a"):
        assert world.remove_family("a")
    assert not other.heads(roots=["a"]) and other.stream_length("events.a") == 0
    assert other.heads() == [] and other.remnants() == []


def test_verify_finds_nothing_wrong_in_what_the_engine_wrote(world: World) -> None:
    _start(world, "a")
    assert [f for f in world.verify() if f.error] == []
    assert [f for f in world.verify(repair=True) if f.error] == []
