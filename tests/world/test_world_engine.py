"""Conformance: the engine on every World (steps, retries, hooks, sleep, children, generations)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any

import pytest

from world import (
    ChildFailedError,
    DivergenceError,
    Engine,
    FatalError,
    HookConflictError,
    JournalRecord,
    NoActiveRunError,
    OwnershipError,
    RetryPolicy,
    RunNotFoundError,
    StepFailedError,
    Workflow,
    WorkflowContext,
    World,
    WorldError,
)

FAST = RetryPolicy(max_attempts=3, initial_delay=0.001)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Counter:
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __call__(self, name: str, value: Any = None) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        return value


def test_completed_steps_replay_without_running_again(world: World) -> None:
    count = Counter()

    async def flow(ctx: WorkflowContext, n: int) -> list[int]:
        out = [await ctx.step(f"s{i}", count, f"s{i}", i * n) for i in range(3)]
        await ctx.create_hook("t-replay").receive()
        out.append(await ctx.step("after", count, "after", 99))
        return out

    engine = Engine(world, {"flow": flow})

    async def main() -> None:
        rid = await engine.start("flow", 2)
        assert (await engine.run(rid)).status == "parked"
        await engine.resume_hook("t-replay", "go")
        info = await engine.run(rid)
        assert info.status == "completed"
        assert info.result == [0, 2, 4, 99]

    run(main())
    assert count.calls == {"s0": 1, "s1": 1, "s2": 1, "after": 1}


def test_rich_values_round_trip_through_steps(world: World) -> None:
    value = {"when": dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC), "pair": (1, 2), "tags": {"a"}}

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step("rich", lambda: value)

    engine = Engine(world, {"flow": flow})

    async def main() -> Any:
        rid = await engine.start("flow")
        return (await engine.run(rid)).result

    assert run(main()) == value


def test_divergence_names_expected_and_actual_steps(world: World) -> None:
    async def v1(ctx: WorkflowContext, _: None) -> None:
        await ctx.step("fetch", lambda: 1)
        await ctx.create_hook("t-div").receive()

    async def v2(ctx: WorkflowContext, _: None) -> None:
        await ctx.step("download", lambda: 1)
        await ctx.create_hook("t-div").receive()

    async def main() -> None:
        rid = await Engine(world, {"flow": v1}).start("flow")
        await Engine(world, {"flow": v1}).run(rid)
        await Engine(world, {"flow": v1}).resume_hook("t-div", 1)
        with pytest.raises(DivergenceError) as err:
            await Engine(world, {"flow": v2}).run(rid)
        assert "'fetch'" in str(err.value) and "'download'" in str(err.value)
        # Nothing was recorded: the original code still finishes the run.
        assert (await Engine(world, {"flow": v1}).run(rid)).status == "completed"

    run(main())


def test_retries_record_each_attempt_and_stop_at_the_limit(world: World) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError(f"try {len(attempts)}")
        return "ok"

    async def flow(ctx: WorkflowContext, _: None) -> str:
        return await ctx.step("flaky", flaky, retry=FAST)

    engine = Engine(world, {"flow": flow})

    async def main() -> None:
        rid = await engine.start("flow")
        info = await engine.run(rid)
        assert info.result == "ok"
        kinds = [(r["t"], r.get("n")) for r in engine.history(rid) if r["t"] in ("attempt", "step")]
        assert kinds == [("attempt", 1), ("attempt", 2), ("step", 3)]

    run(main())
    assert len(attempts) == 3


def test_fatal_error_stops_retries_and_replays_the_same_failure(world: World) -> None:
    calls: list[int] = []

    class Refused(FatalError):
        pass

    def refuse() -> None:
        calls.append(1)
        raise Refused("no")

    seen: list[str] = []

    async def flow(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.step("refuse", refuse, retry=FAST)
        except StepFailedError as exc:
            seen.append(f"{exc.error_type}:{exc.message}:{exc.attempts}")
        await ctx.create_hook("t-fatal").receive()
        return "done"

    engine = Engine(world, {"flow": flow})

    async def main() -> None:
        rid = await engine.start("flow")
        await engine.run(rid)
        await engine.resume_hook("t-fatal", None)
        assert (await engine.run(rid)).result == "done"

    run(main())
    assert calls == [1]
    assert seen == ["Refused:no:1", "Refused:no:1"]


def test_unserializable_result_fails_the_step_before_anything_is_written(world: World) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> None:
        await ctx.step("bad", lambda: {"items": [1, 2, object()]})

    engine = Engine(world, {"flow": flow})

    async def main() -> None:
        rid = await engine.start("flow")
        info = await engine.run(rid)
        assert info.status == "failed"
        assert info.error is not None
        assert info.error["type"] == "SerializationError"
        assert "step 'bad'" in info.error["message"]
        assert "result['items'][2]" in info.error["message"]
        assert not [r for r in engine.history(rid) if r["t"] in ("step", "attempt")]

    run(main())


def test_unhandled_workflow_error_fails_the_run(world: World) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> None:
        raise ValueError("bad input")

    engine = Engine(world, {"flow": flow})

    async def main() -> None:
        rid = await engine.start("flow")
        info = await engine.run(rid)
        error = {"type": "ValueError", "message": "bad input"}
        assert (info.status, info.error) == ("failed", error)

    run(main())


def test_now_uuid_random_are_the_same_on_replay(world: World) -> None:
    seen: list[tuple[Any, ...]] = []

    async def flow(ctx: WorkflowContext, _: None) -> None:
        first = (ctx.now(), ctx.uuid(), ctx.random())
        await ctx.step("a", lambda: None)
        second = (ctx.now(), ctx.uuid(), ctx.random())
        seen.append((first, second))
        await ctx.create_hook("t-det").receive()

    engine = Engine(world, {"flow": flow})

    async def main() -> None:
        rid = await engine.start("flow")
        await engine.run(rid)
        await asyncio.sleep(0.01)
        await engine.resume_hook("t-det", None)
        await engine.run(rid)

    run(main())
    assert len(seen) == 2 and seen[0] == seen[1]
    (now1, uuid1, r1), (now2, uuid2, r2) = seen[0]
    assert now1 <= now2 and uuid1 != uuid2 and r1 != r2
    assert now1.tzinfo is not None


def test_poll_takes_all_pending_without_parking(world: World) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> list[Any]:
        hook = ctx.create_hook("t-poll")
        first = await hook.poll()
        await ctx.step("between", lambda: None)
        got = [await hook.receive()]
        got += await hook.poll()
        return [first, got]

    engine = Engine(world, {"flow": flow})

    async def main() -> Any:
        rid = await engine.start("flow")
        await engine.run(rid)
        for i in range(3):
            await engine.resume_hook("t-poll", i)
        return (await engine.run(rid)).result

    assert run(main()) == [[], [0, 1, 2]]


def test_empty_polls_record_nothing_and_replay_to_the_same_values(world: World) -> None:
    seen: list[Any] = []

    def deliver_soon() -> None:
        threading.Timer(0.05, world.deliver, (ctx_root[0], "t-empty", "x")).start()

    ctx_root: list[str] = []

    async def flow(ctx: WorkflowContext, _: None) -> None:
        hook = ctx.create_hook("t-empty")
        empty = 0
        await ctx.step("arrange", deliver_soon)
        while not (got := await hook.poll()):
            empty += 1
            await asyncio.sleep(0.01)
        seen.append((empty, got, await hook.poll()))
        await ctx.create_hook("t-park").receive()

    engine = Engine(world, {"flow": flow})

    async def main() -> list[JournalRecord]:
        rid = await engine.start("flow")
        ctx_root.append(rid)
        await engine.run(rid)
        await engine.resume_hook("t-park", None)
        await engine.run(rid)
        return engine.history(rid)

    history = run(main())
    assert len(seen) == 2 and seen[0] == seen[1]
    empty, got, after = seen[0]
    assert empty >= 1 and got == ["x"] and after == []
    polls = [r for r in history if r["t"] == "recv" and r.get("poll")]
    assert [(p["skip"], p["values"]) for p in polls] == [(empty, ["x"])]


def test_hook_tokens_have_one_owner_and_unknown_tokens_say_so(world: World) -> None:
    async def holder(ctx: WorkflowContext, token: str) -> Any:
        return await ctx.create_hook(token).receive()

    engine = Engine(world, {"holder": holder})

    async def main() -> None:
        with pytest.raises(NoActiveRunError):
            await engine.resume_hook("nobody-waits", 1)
        first = await engine.start("holder", "shared")
        await engine.run(first)
        second = await engine.start("holder", "shared")
        info = await engine.run(second)
        assert info.status == "failed" and info.error and "HookConflictError" in info.error["type"]
        assert await engine.resume_hook("shared", "hi") == first
        assert (await engine.run(first)).result == "hi"
        # The token is released when its run ends.
        with pytest.raises(NoActiveRunError):
            await engine.resume_hook("shared", "again")

    run(main())
    assert HookConflictError.__name__ == "HookConflictError"


def test_generated_hook_tokens_are_long_and_distinct(world: World) -> None:
    tokens: list[str] = []

    async def flow(ctx: WorkflowContext, _: None) -> None:
        tokens.append(ctx.create_hook().token)
        tokens.append(ctx.create_hook().token)

    engine = Engine(world, {"flow": flow})
    run(engine.run(run(engine.start("flow"))))
    assert len(set(tokens)) == 2 and all(len(t) >= 22 for t in tokens)


def test_sleep_parks_until_due_then_continues(world: World) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> str:
        start = ctx.now()  # the run's start record: creating and loading it take time too
        await ctx.sleep(1.0)  # long enough that a loaded machine still parks before it is due
        assert ctx.now() >= start + dt.timedelta(seconds=1.0)
        return "woke"

    engine = Engine(world, {"flow": flow})

    async def main() -> None:
        rid = await engine.start("flow")
        info = await engine.run(rid)
        assert info.status == "parked" and info.wake_at is not None
        assert rid not in engine.runnable()
        assert await engine.wait(rid, timeout=5.0)
        assert rid in engine.runnable()
        assert (await engine.run(rid)).result == "woke"

    run(main())


def test_child_runs_park_the_parent_and_deliver_their_result(world: World) -> None:
    count = Counter()

    async def parent(ctx: WorkflowContext, n: int) -> Any:
        a = await ctx.start_child("child", n)
        b = await ctx.start_child("child", n + 1)
        results = [await a.result(), await b.result()]
        return [results, a.run_id, b.run_id]

    async def child(ctx: WorkflowContext, n: int) -> int:
        token = f"t-child-{n}"
        extra = await ctx.create_hook(token).receive()
        return int(await ctx.step("square", count, "square", n * n)) + int(extra)

    engine = Engine(world, {"parent": parent, "child": child})

    async def main() -> None:
        rid = await engine.start("parent", 3)
        assert (await engine.run(rid)).waiting == {"child": f"{rid}.0"}
        assert engine.info(f"{rid}.1").status == "parked"
        await engine.resume_hook("t-child-4", 100)
        await engine.run(f"{rid}.1")
        assert engine.info(f"{rid}.1").status == "completed"
        await engine.resume_hook("t-child-3", 10)
        info = await engine.run(rid)
        assert info.result == [[19, 116], f"{rid}.0", f"{rid}.1"]
        assert engine.info(f"{rid}.0").parent == rid

    run(main())
    assert count.calls == {"square": 2}


def test_child_failure_raises_in_the_parent(world: World) -> None:
    async def parent(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.run_child("child")
        except ChildFailedError as exc:
            return f"caught {exc.error_type}"
        return "no"

    async def child(ctx: WorkflowContext, _: None) -> None:
        raise KeyError("gone")

    engine = Engine(world, {"parent": parent, "child": child})
    rid = run(engine.start("parent"))
    assert run(engine.run(rid)).result == "caught KeyError"


def test_child_reads_its_parents_hook_exactly_once(world: World) -> None:
    async def parent(ctx: WorkflowContext, _: None) -> Any:
        hook = ctx.create_hook("t-family")
        first = await ctx.run_child("child", "t-family")
        rest = await hook.poll()
        return [first, rest]

    async def child(ctx: WorkflowContext, token: str) -> Any:
        return await ctx.hook(token).receive()

    engine = Engine(world, {"parent": parent, "child": child})

    async def main() -> Any:
        rid = await engine.start("parent")
        await engine.run(rid)
        await engine.resume_hook("t-family", "one")
        await engine.resume_hook("t-family", "two")
        return (await engine.run(rid)).result

    assert run(main()) == ["one", ["two"]]


def test_continue_as_new_starts_a_fresh_generation_keeping_hooks(world: World) -> None:
    count = Counter()

    async def loop(ctx: WorkflowContext, state: dict[str, Any]) -> Any:
        hook = ctx.create_hook("t-loop") if state["n"] == 0 else ctx.hook("t-loop")
        message = await hook.receive()
        total = await ctx.step("add", count, "add", state["total"] + message)
        if state["n"] == 2:
            return {"total": total, "generation": ctx.generation}
        ctx.continue_as_new({"n": state["n"] + 1, "total": total})

    engine = Engine(world, {"loop": loop})

    async def main() -> Any:
        rid = await engine.start("loop", {"n": 0, "total": 0})
        for value in (1, 2, 3):
            await engine.run(rid)
            await engine.resume_hook("t-loop", value)
        return (await engine.run(rid)).result, engine.history(rid)

    result, history = run(main())
    assert result == {"total": 6, "generation": 2}
    assert count.calls == {"add": 3}
    assert [r["g"] for r in history if r["t"] in ("start", "gen")] == [0, 1, 2]


def test_info_and_unknown_runs(world: World) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> int:
        return 1

    engine = Engine(world, {"flow": flow})
    rid = run(engine.start("flow", run_id="my-run", meta={"agent": "demo"}))
    assert rid == "my-run"
    info = engine.info(rid)
    assert (info.status, info.workflow, info.meta) == ("running", "flow", {"agent": "demo"})
    assert rid in engine.runnable()
    assert run(engine.run(rid)).status == "completed"
    assert rid not in engine.runnable()
    with pytest.raises(RunNotFoundError):
        engine.info("missing")


def test_a_second_owner_is_refused(world: World) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> None:
        await ctx.create_hook("t-own").receive()

    engine = Engine(world, {"flow": flow})
    rid = run(engine.start("flow"))
    lease = world.acquire(rid)
    try:
        with pytest.raises(OwnershipError):
            run(engine.run(rid))
    finally:
        lease.release()
    assert run(engine.run(rid)).status == "parked"


def test_delivery_during_a_run_is_not_lost(world: World) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> Any:
        hook = ctx.create_hook("t-race")
        await ctx.step("deliver-meanwhile", deliver)
        return [await hook.receive()]

    engine = Engine(world, {"flow": flow})

    async def deliver() -> None:
        await engine.resume_hook("t-race", "raced")

    rid = run(engine.start("flow"))
    assert run(engine.run(rid)).result == ["raced"]


def test_delivery_racing_the_lease_release_is_picked_up(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def flow(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.create_hook("t-release").receive()

    engine = Engine(world, {"flow": flow})
    rid = run(engine.start("flow"))
    commit = world.commit
    raced: list[int] = []

    def commit_then_deliver(root: str, bodies: Any = (), *, head: Any = None) -> list[int]:
        positions = commit(root, bodies, head=head)
        if head is not None and not raced:  # another process delivers after the drive
            raced.append(world.deliver(root, "t-release", "late"))  # parked, before release
        return positions

    monkeypatch.setattr(world, "commit", commit_then_deliver)
    assert run(engine.run(rid)).result == "late"
    assert raced


def test_head_does_not_grow_with_finished_children(world: World) -> None:
    async def parent(ctx: WorkflowContext, n: int) -> int:
        return sum([await ctx.run_child("child", i) for i in range(n)])

    async def child(ctx: WorkflowContext, i: int) -> int:
        return i

    engine = Engine(world, {"parent": parent, "child": child})
    rid = run(engine.start("parent", 70))
    assert run(engine.run(rid)).result == sum(range(70))
    [found] = world.heads(roots=[rid])
    head = found.head
    assert head is not None and len(head["runs"]) == 11  # the root and the latest 10 children
    old = engine.info(f"{rid}.0")  # dropped from the head: found in the journal
    assert (old.status, old.result, old.parent) == ("completed", 0, rid)
    assert engine.info(f"{rid}.69").result == 69


def test_concurrent_operations_in_one_run_are_refused_clearly(world: World) -> None:
    async def slow() -> int:
        await asyncio.sleep(0.01)
        return 1

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        return await asyncio.gather(ctx.step("a", slow), ctx.step("b", slow))

    engine = Engine(world, {"flow": flow})
    info = run(engine.run(run(engine.start("flow"))))
    assert info.status == "failed" and info.error is not None
    assert "sequential" in info.error["message"] and "'a'" in info.error["message"]


@pytest.mark.parametrize("ending", ["returns", "raises"])
def test_an_operation_the_workflow_left_running_records_nothing_after_it_ended(
    world: World, ending: str
) -> None:
    """What asyncio.gather leaves when one operation fails, made certain: a step still
    running when the workflow code ends finds the run ended, records nothing, and the run
    stays finished (a step record after `done` or `failed` replayed it as running)."""
    left: list[asyncio.Future[Any]] = []

    async def slow() -> int:
        await asyncio.sleep(0.02)
        return 1

    async def flow(ctx: WorkflowContext, _: None) -> Any:
        left.append(asyncio.ensure_future(ctx.step("a", slow)))
        await asyncio.sleep(0)  # step a begins its function
        if ending == "raises":
            raise RuntimeError("gave up")
        return "early"

    engine = Engine(world, {"flow": flow})

    async def main() -> Any:
        rid = await engine.start("flow")
        info = await engine.run(rid)
        with pytest.raises(WorldError, match="ended after the workflow code had returned"):
            await left[0]
        return rid, info

    rid, info = run(main())
    status = "failed" if ending == "raises" else "completed"
    assert info.status == status
    assert [r["t"] for r in engine.history(rid)][-1] in ("done", "failed")
    assert "step" not in [r["t"] for r in engine.history(rid)]
    assert Engine(world, {"flow": flow}).info(rid).status == status


def test_a_receive_and_a_child_start_wait_for_the_next_durable_record(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from world import LocalWorld

    synced: list[list[str]] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        with open(f"/proc/self/fd/{fd}", "rb") as f:  # what the file holds when synced
            data = f.read()
        synced.append([t for t in ("recv", "start", "child", "step") if t.encode() in data])
        real(fd)

    async def child(ctx: WorkflowContext, _: None) -> str:
        return str(await ctx.step("work", lambda: "done"))

    async def flow(ctx: WorkflowContext, _: None) -> str:
        got = await ctx.create_hook("t-group").receive()
        return f"{got} {await ctx.run_child('child', None)}"

    world = LocalWorld(tmp_path / "data")
    engine = Engine(world, {"flow": flow, "child": child})

    async def main() -> Any:
        rid = await engine.start("flow")
        await engine.run(rid)
        await engine.resume_hook("t-group", "go")
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        info = await engine.run(rid)
        monkeypatch.setattr(os, "fdatasync", real)
        return info.result

    assert run(main()) == "go done"
    journal = [kinds for kinds in synced if "step" in kinds or "recv" in kinds]
    # One fsync made the receive, the child's start and its step durable together.
    assert journal and journal[0] == ["recv", "start", "child", "step"]
    world.close()


def test_children_read_the_family_meta_and_the_input_of_the_generation_that_started_them(
    world: World,
) -> None:
    async def parent(ctx: WorkflowContext, data: dict[str, Any]) -> Any:
        if data["g"] == 0:
            seen = await ctx.run_child("child", "awaited")
            await ctx.start_child("child", "outliving")
            ctx.continue_as_new({"g": 1, "seen": seen})
        await ctx.create_hook("t-end").receive()
        return data["seen"]

    async def child(ctx: WorkflowContext, name: str) -> Any:
        await ctx.create_hook(f"t-{name}").receive()
        try:
            given = ctx.parent_input()
        except WorldError as exc:
            given = str(exc)
        return [ctx.meta, given]

    flows: dict[str, Workflow] = {"parent": parent, "child": child}

    async def main() -> None:
        engine = Engine(world, flows)
        rid = await engine.start("parent", {"g": 0}, meta={"m": 1})
        asking = Engine(world, {"parent": _root_asks})
        failed = await asking.run(await asking.start("parent", None))
        assert failed.status == "failed" and failed.error is not None, failed
        assert "not known" in failed.error["message"], failed
        await engine.run(rid)
        # A fresh engine (a new process) replays the child and gives the same input.
        fresh = Engine(world, flows)
        await fresh.resume_hook("t-awaited", None)
        await fresh.run(rid)
        assert fresh.info(f"{rid}.0").result == [{"m": 1}, {"g": 0}]
        # The second child outlived that generation: its parent's input is another now.
        await fresh.resume_hook("t-outliving", None)
        await fresh.run(rid)
        meta, given = fresh.info(f"{rid}.1").result
        assert meta == {"m": 1} and "not known" in given
        await fresh.resume_hook("t-end", None)
        assert (await fresh.run(rid)).result == [{"m": 1}, {"g": 0}]

    run(main())


async def _root_asks(ctx: WorkflowContext, _: Any) -> Any:
    return ctx.parent_input()  # a root run has no parent


def test_delivery_ids_are_told_to_the_sender_and_to_the_run(world: World) -> None:
    taken: list[list[int]] = []

    async def flow(ctx: WorkflowContext, _: Any) -> Any:
        hook = ctx.create_hook("t-ids")
        first = await hook.receive()
        taken.append(hook.taken_ids)
        rest = await hook.poll()
        taken.append(hook.taken_ids)
        return [first, *rest]

    engine = Engine(world, {"flow": flow})

    async def main() -> list[int]:
        rid = await engine.start("flow", None)
        assert (await engine.run(rid)).status == "parked"
        sent = [await engine.deliver("t-ids", n) for n in range(3)]
        assert {d.run_id for d in sent} == {rid}
        assert (await engine.run(rid)).result == [0, 1, 2]
        return [d.id for d in sent]

    ids = run(main())
    assert ids == sorted(ids) and len(set(ids)) == 3
    # The ids the run took are the sender's, the same on a replay (the first drive parked).
    assert taken[-2:] == [ids[:1], ids[1:]]


def test_the_journal_is_every_record_with_its_position(world: World) -> None:
    async def flow(ctx: WorkflowContext, _: Any) -> Any:
        return await ctx.step("one", lambda: 1)

    engine = Engine(world, {"flow": flow})
    rid = run(engine.start("flow", None))
    run(engine.run(rid))
    journal = engine.journal(rid)
    assert [rec["t"] for _, rec in journal] == [rec["t"] for rec in engine.history(rid)]
    assert [pos for pos, _ in journal] == [pos for pos, _ in world.load(rid).records]
