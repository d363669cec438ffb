"""The engine: starts runs, drives run families by replaying their journals, delivers payloads.

`Engine.run` takes the family lease, rebuilds the family from its current generations, and
drives every run in it that can progress (in this process, children included) until all are
parked or finished. It then writes the head, releases the lease and looks at the inbox once
more, so a delivery that raced the release is not left waiting (the deliverer writes first
and then tries the lease; the owner releases first and then re-checks).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import secrets
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import _codec
from ._context import WorkflowContext, _ContinueAsNew, _Park
from ._errors import (
    CorruptJournalError,
    DivergenceError,
    HookConflictError,
    NoActiveRunError,
    OwnershipError,
    RunNotFoundError,
    SerializationError,
    StorageError,
    WorkflowNotFoundError,
    WorldError,
)
from ._family import FINISHED, Family, Run, build_head, load_family
from ._fork import ForkPlan, check_plan, plan_fork
from ._offload import Placement
from ._records import InboxState, JournalRecord, StoredRecord
from ._store import IO, LAZY, RECORD, Order, Scheduling, scheduling
from ._world import DRIVING, World, check_name, check_run_id, root_of

Workflow = Callable[[WorkflowContext, Any], Awaitable[Any]]
T = TypeVar("T")
# Errors about the machinery, not the workflow: they leave the run as it was, to resume later.
_INFRASTRUCTURE = (DivergenceError, StorageError, CorruptJournalError, WorkflowNotFoundError)


@dataclass(frozen=True)
class RunInfo:
    """What is known about a run (from the head, the family's status cache)."""

    run_id: str
    workflow: str
    status: str  # running | parked | completed | failed
    parent: str | None = None
    generation: int = 0
    # {"hook": token} | {"timer": ts} | {"hook": token, "timer": ts} (a deadline) | {"child": id}
    waiting: dict[str, Any] | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    created: dt.datetime | None = None
    updated: dt.datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def wake_at(self) -> dt.datetime | None:
        """When a run parked on a timer becomes runnable."""
        if self.waiting and "timer" in self.waiting:
            return dt.datetime.fromtimestamp(self.waiting["timer"], dt.UTC)
        return None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


@dataclass(frozen=True)
class Delivery:
    """A durable delivery (`Engine.deliver`): the run owning the hook, and the delivery's id
    (its place in the family's inbox: `InboxItem.id`, `HookHandle.taken_ids`)."""

    run_id: str
    id: int


def _time(ts: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ts, dt.UTC) if ts else None


def _info(run_id: str, entry: dict[str, Any]) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        workflow=entry.get("workflow", ""),
        status=entry.get("status", "running"),
        parent=entry.get("parent"),
        generation=entry.get("g", 0),
        waiting=entry.get("waiting"),
        result=entry.get("result"),
        error=entry.get("error"),
        created=_time(entry.get("created")),
        updated=_time(entry.get("updated")),
        meta=dict(entry.get("meta") or {}),
    )


class Engine:
    """Drives workflows registered by name against one world."""

    def __init__(self, world: World, workflows: Mapping[str, Workflow]) -> None:
        self.world = world
        self._workflows = dict(workflows)
        # Called with the root run id whenever the head is written; what it returns is kept
        # in the head as `note` (a caller's listing cache: one small file read per family).
        self.head_note: Callable[[str], Any] | None = None
        self._driving = 0  # families this engine is driving now
        self._placement = Placement()  # where its storage calls run
        # How this engine schedules durability with its world (`_store`).
        self._store: Scheduling = scheduling(world)

    @property
    def driving(self) -> int:
        """How many run families this engine is driving now."""
        return self._driving

    def timers_version(self) -> Hashable:
        """A cheap token that changes whenever a process of this world puts a run to sleep on a
        timer (None: the world cannot tell): what `wait_timers` compares."""
        return self._store.timers_version()

    def timers_since(self, version: Hashable) -> tuple[Hashable, list[str] | None]:
        """The version now, and the roots whose runs were put to sleep on a timer since
        `version` was (None: the world cannot say which: read every head)."""
        return self._store.timers_since(version)

    async def wait_timers(self, version: Hashable, timeout: float) -> bool:
        """Wait until `timers_version()` differs from `version`; False on timeout (a world
        that cannot tell waits out the timeout)."""
        return await self._store.wait_timers(version, timeout)

    def _write_head(self, family: Family) -> dict[str, Any]:
        head = build_head(family)
        if self.head_note is not None:
            head["note"] = self.head_note(family.root)
        self.world.commit(family.root, head=head)
        return head

    async def io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Make a storage call from the event loop where the world wants it (`World.io`,
        `_offload.Placement`: on threads while several families are driven, inline while one
        is and the world answers at once); the caller goes on only once it has returned (a
        cancellation waits for it: `_offload.offload`)."""
        return await self._placement.call(self._store.io, self._driving, fn, *args, **kwargs)

    # -- outside workflows -----------------------------------------------------------------------
    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Create a root run durably (it does not run yet); return its id."""
        if workflow not in self._workflows:
            raise WorkflowNotFoundError(f"no workflow registered as {workflow!r}")
        run_id = check_run_id(run_id) if run_id is not None else "r_" + secrets.token_hex(16)
        if "." in run_id:
            raise WorldError(f"run id {run_id!r}: a root run id cannot contain '.'")
        rec = self._start_record(run_id, workflow, input, None, meta or {}, {"w": 0, "x": []})
        family = Family(run_id)
        body = self._encode(family.pack(rec, 0.0), "input", f"run {run_id}")
        [pos] = await self.io(self.world.create_family, run_id, [body])
        family.apply(pos, _codec.decode(body))
        # A worker that took the new run over at once writes its head as it drives it.
        with contextlib.suppress(OwnershipError):
            await self.off_loop(self._write_head, family)
        return run_id

    async def fork(
        self,
        source: str,
        target: str | None = None,
        *,
        at: int | None = None,
        streams: Mapping[str, int] | None = None,
        meta: dict[str, Any] | None = None,
        aliases: Mapping[str, str] | None = None,
    ) -> ForkPlan:
        """Create root run `target` (default: a new id) as a fork of the family of root run
        `source` at journal position `at` (`WorkflowContext.checkpoint()`; None: its latest
        record), with the first `n` items of each of its streams named in `streams` (source
        name → n) copied under the fork's names; `meta`: the fork's root meta (default the
        source's; its hook tokens are replaced as everywhere; `aliases`: more exact strings to
        replace so, e.g. the source's id where its data holds it). The source is only read: it
        may be driven meanwhile. Returns what was written (`ForkPlan`: the fork's id, its
        streams, the token map). Driving the fork replays what was recorded up to `at`
        without running any of it again; what follows runs in the fork alone."""
        target = check_run_id(target) if target is not None else "r_" + secrets.token_hex(16)
        planned = functools.partial(plan_fork, at=at, streams=streams, meta=meta, aliases=aliases)
        plan = await self.off_loop(planned, self.world, source, target)
        await self.off_loop(check_plan, self.world, plan)
        await self.before_effect(observed=True)  # what this process appended comes first
        await self.io(
            self.world.create_family, target, plan.bodies, streams=plan.streams, hooks=plan.hooks
        )
        family = await self.off_loop(load_family, self.world, target)
        await self.off_loop(self._write_head, family)
        return plan

    async def run(self, run_id: str, *, wait: float | None = None) -> RunInfo:
        """Own the run's family and drive it until nothing in it can progress."""
        root = root_of(check_run_id(run_id))
        off = self.off_loop
        if not await off(self._store.family_exists, root):
            raise RunNotFoundError(f"no run {run_id!r}")
        first, head = True, None
        while True:
            try:
                lease = await off(self.world.acquire, root, wait)
            except OwnershipError:
                if first:
                    raise
                head = None  # another owner has gone on: ask the stored head
                break  # the new owner will see the late delivery
            first = False
            try:
                family = await off(load_family, self.world, root)
                family.check_replayable()
                self._driving += 1
                try:
                    await self._drive_family(family)
                finally:
                    self._driving -= 1
                    head = await off(self._write_head, family)
                if (floor := family.inbox_floor()) is not None:
                    await off(self._store.compact_inbox, root, floor)  # consumed ones leave
            finally:
                await off(lease.release)
            if await off(self.world.inbox_end, root) == family.inbox_mark:
                break
        entry = head["runs"].get(run_id) if head is not None else None
        if entry is not None:
            return _info(run_id, entry)
        return await off(self.info, run_id)

    async def before_effect(self, *, observed: bool) -> None:
        """`World.before_effect` for a step about to begin its effect, made where it may wait:
        an observed effect on a network world waits for a round trip (made where `io` says);
        anything else returns at once or waits for a local disk."""
        store = self._store
        if observed and store.io is IO.NETWORK:
            await self.io(store.before_effect)
        else:
            store.before_effect(observed=observed)

    async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """A call that waits only on a network world: made where `io` says there, inline on
        the others (reads, and writes whose wait is their own)."""
        if self._store.io is not IO.NETWORK:
            return fn(*args)
        return await self.io(fn, *args)

    async def resume_hook(self, token: str, payload: Any = None) -> str:
        """Deliver `payload` durably to the run owning `token`; return that run's id."""
        return (await self.deliver(token, payload)).run_id

    async def deliver(self, token: str, payload: Any = None) -> Delivery:
        """`resume_hook` that also says where the delivery is in the inbox: a sender can tell
        from it which of the run's takings got it (`HookHandle.taken_ids`)."""
        owner = await self.off_loop(self._hook_target, token)
        try:
            at = await self.io(self.world.deliver, root_of(owner), token, payload)
        except SerializationError as exc:
            path, reason = _codec.find_unserializable(payload, "payload")
            # The token is the run's secret: the message names the run instead.
            raise SerializationError(
                f"a delivery to {root_of(owner)}: cannot serialize {path}: {reason}", path
            ) from exc
        return Delivery(owner, at)

    def _hook_target(self, token: str) -> str:
        """The run owning `token`, if a delivery to it can still be taken."""
        owner = self.world.hook_owner(check_name(token, "hook token"))
        if owner is None:
            raise NoActiveRunError(token)
        entry = (self._store.read_head(root_of(owner)) or {}).get("runs", {}).get(owner, {})
        if entry.get("status") in FINISHED:
            self.world.set_hook(token, None, holder=owner)  # left behind by a crash after the end
            raise NoActiveRunError(token)
        return owner

    def check(self, run_id: str) -> None:
        """Raise `CorruptJournalError` if the family of `run_id` cannot be driven: damage in
        what the world stores for it, or a record a repair replaced where a replay reads — what
        `run` finds before it drives, for tools that only read (`eve inspect`). Reads every
        record of the family's files once."""
        root = root_of(check_run_id(run_id))
        self._store.check_intact(root)
        load_family(self.world, root).check_replayable()

    def info(self, run_id: str) -> RunInfo:
        """The run's status from the head; rebuilt from the journal if the head is missing."""
        root = root_of(check_run_id(run_id))
        if not self._store.family_exists(root):
            raise RunNotFoundError(f"no run {run_id!r}")
        head = self._store.read_head(root)
        entry = (head or {}).get("runs", {}).get(run_id)
        if entry is None:  # no head, or an old finished child: ask the journal
            family = load_family(self.world, root, full=True)
            entry = build_head(family)["runs"].get(run_id)
            run = family.runs.get(run_id)
            if entry is None and run is not None:
                entry = build_head(Family(root, runs={run_id: run}))["runs"][run_id]
        if entry is None:
            raise RunNotFoundError(f"no run {run_id!r}")
        return _info(run_id, entry)

    def runs(self) -> list[RunInfo]:
        """Every run of every family, from the heads (no lock taken)."""
        out: list[RunInfo] = []
        for family in self.world.heads(inbox=False):  # a run's info needs no inbox mark
            root = family.root
            head = family.head or build_head(load_family(self.world, root))
            out.extend(_info(rid, entry) for rid, entry in head.get("runs", {}).items())
        return out

    def runnable(self) -> list[str]:
        """Runs that can progress now: interrupted, due timers, pending deliveries."""
        now, found = self.world.now(), []
        # One call, however many families are parked (a world may answer it from an index).
        for family in self.world.heads(runnable=True):
            head = family.head
            if head is None:
                found.append(family.root)
                continue
            fresh = family.inbox_end != family.inbox_read
            for rid, entry in head.get("runs", {}).items():
                status, waiting = entry.get("status"), entry.get("waiting") or {}
                if (
                    status == "running"
                    or (status == "parked" and waiting.get("timer", now + 1) <= now)
                    or (status == "parked" and "hook" in waiting and fresh)
                ):
                    found.append(rid)
        return found

    def history(self, run_id: str) -> list[JournalRecord]:
        """Every journal record of a run, all generations (reads the whole journal)."""
        root = root_of(check_run_id(run_id))
        log = load_family(self.world, root, full=True, log=True).log or []
        return [rec for rec in log if rec.get("run") == run_id]

    def generations(self, run_id: str) -> list[tuple[int, int, Any]]:
        """``(journal position, generation, input)`` of each generation of the run, oldest
        first (reads the whole journal): the points `fork(at=)` can begin the run afresh at,
        nothing of it recorded yet but its input."""
        root = root_of(check_run_id(run_id))
        family = Family(root)
        out: list[tuple[int, int, Any]] = []
        for pos, stored in self.world.load(root, 0).records:
            whole = family.apply(pos, stored)  # a `recv` it cannot fill is marked, not raised
            if whole.get("run") == run_id and whole.get("t") in ("start", "gen"):
                out.append((pos, int(whole.get("g", 0)), whole.get("input")))
        return out

    def journal(self, run_id: str) -> list[tuple[int, JournalRecord]]:
        """Every journal record of the run's family with its position, whole (a repair's
        `gap` records too, as `{"t": "gap", "n"}`: what a caller reports lost by them)."""
        root = root_of(check_run_id(run_id))
        family = load_family(self.world, root, full=True, log=True)
        return list(zip(family.log_at, family.log or [], strict=True))

    def timers(self, run_id: str | None = None) -> list[tuple[str, float]]:
        """`(run id, when)` of every run parked on a timer (alone or a receive's deadline),
        from the heads in one call; with `run_id`, of its family alone (its head)."""
        if run_id is not None:
            root = root_of(check_run_id(run_id))
            heads = [(root, self._store.read_head(root) or {})]
        else:
            heads = [(f.root, f.head or {}) for f in self.world.heads(inbox=False)]
        return [
            (rid, float(entry["waiting"]["timer"]))
            for _, head in heads
            for rid, entry in head.get("runs", {}).items()
            if entry.get("status") == "parked" and "timer" in (entry.get("waiting") or {})
        ]

    async def wait(self, run_id: str, timeout: float) -> bool:
        """Wait (no lock held) until the run's family has a delivery or a due timer."""
        root = root_of(check_run_id(run_id))
        head = await self.off_loop(self._store.read_head, root) or {}
        timers = [
            e["waiting"]["timer"]
            for e in head.get("runs", {}).values()
            if e.get("status") == "parked" and "timer" in (e.get("waiting") or {})
        ]
        until = min([self.world.now() + timeout, *timers])
        mark = head.get("inbox_mark", -1)
        if await self.world.wait_inbox(root, mark, max(until - self.world.now(), 0.0)):
            return True
        return bool(timers) and min(timers) <= self.world.now()

    # -- driving ---------------------------------------------------------------------------------
    async def _drive_family(self, family: Family) -> None:
        tried: dict[str, tuple[Any, ...]] = {}
        driving = DRIVING.set(family.root)  # its workflows' reads (`DRIVING`)
        try:
            while (run := self._pick(family, tried)) is not None:
                await self._drive_run(family, run)
        finally:
            DRIVING.reset(driving)

    def _pick(self, family: Family, tried: dict[str, tuple[Any, ...]]) -> Run | None:
        for run in list(family.runs.values()):
            if run.finished or not self._can_progress(family, run):
                continue
            key = (run.g, len(run.records), repr(run.waiting), run.status)
            if tried.get(run.id) == key:
                continue  # driven already and nothing changed since
            tried[run.id] = key
            return run
        return None

    def _can_progress(self, family: Family, run: Run) -> bool:
        if run.status != "parked" or not run.waiting:
            return True
        waiting = run.waiting
        if "hook" in waiting and family.take(waiting["hook"], 1):
            return True
        if "timer" in waiting:  # alone, or a hook's deadline
            return bool(waiting["timer"] <= self.world.now())
        if "hook" in waiting:
            return False
        if "child" in waiting:
            child = family.runs.get(waiting["child"])
            return child is None or child.finished
        return True

    async def _drive_run(self, family: Family, run: Run) -> None:
        fn = self._workflows.get(run.workflow)
        if fn is None:
            raise WorkflowNotFoundError(f"run {run.id}: no workflow registered as {run.workflow!r}")
        while True:
            ctx = WorkflowContext(self, family, run)
            try:
                result = await fn(ctx, run.input)
            except _Park as park:
                await ctx._release_closed()  # a closed hook takes no delivery while parked
                last = run.records[-1] if run.records else None
                if last is None or last["t"] != "park" or last.get("waiting") != park.waiting:
                    rec: JournalRecord = {"t": "park", "waiting": park.waiting}
                    # Lazy (a replay parks again), but what the run appended is durable
                    # first: it may wait parked for long, and readers see its items.
                    await self.append(family, run, rec, order=Order(lazy=True, streams=0))
                return
            except _ContinueAsNew as cont:
                await ctx._settle_hooks()  # carried into the new generation: claimed first
                await self._continue_as_new(family, run, cont.input)
                continue
            except _INFRASTRUCTURE:
                raise
            except Exception as exc:
                ctx._ended = True  # (before any wait: an operation still running records no more)
                if ctx._parked is not None:
                    raise WorldError(f"run {run.id}: workflow code swallowed a park") from exc
                await ctx._release_closed()
                await self._finish(
                    family, run, error={"type": type(exc).__name__, "message": str(exc)}
                )
                return
            ctx._ended = True
            if ctx._parked is not None:
                raise WorldError(f"run {run.id}: workflow code swallowed a park (BaseException)")
            self._check_consumed(ctx, run)
            await ctx._release_closed()
            await self._finish(family, run, result=result)
            return

    def _check_consumed(self, ctx: WorkflowContext, run: Run) -> None:
        rest = [
            r for r in run.records[ctx._pos :] if r.get("t") in ("step", "hook", "recv", "child")
        ]
        if rest:
            raise DivergenceError(run.id, ctx._pos, rest[0]["t"], "the workflow returning")

    async def _finish(
        self, family: Family, run: Run, *, result: Any = None, error: Any = None
    ) -> None:
        # Nothing re-appends what the run appended once this record is durable: its items
        # are durable with it. Both may wait for the next commit (before any effect or reader
        # that follows, the head at the latest): a crash that loses them together only runs
        # the run's code to its end again, which appends them again (keyed) and ends it.
        final = Order(streams=0, unobserved=True)
        if error is None:
            try:
                rec: JournalRecord = {"t": "done", "result": result}
                await self.append(family, run, rec, label="result", order=final)
            except SerializationError as exc:
                error = {"type": "SerializationError", "message": str(exc)}
        if error is not None:
            await self.append(family, run, {"t": "failed", "error": error}, order=final)
        for token in sorted(run.hooks):
            await self.io(self.world.set_hook, token, None, holder=run.id)

    async def _continue_as_new(self, family: Family, run: Run, input: Any) -> None:
        rec: JournalRecord = {
            "t": "gen",
            "g": run.g + 1,
            "input": input,
            "inbox": family.inbox_state(),
            "hooks": sorted(run.hooks),
            "nc": run.next_child,
            "workflow": run.workflow,
        }
        # Lazy: losing it replays the ended generation, which continues as new again with the
        # same input (its records are durable); the next durable record (the new
        # generation's first) covers it. The stream items of the ended generation are
        # appended by no replay any more: durable first.
        order = Order(lazy=True, streams=0)
        await self.append(family, run, rec, label="continue_as_new input", key="input", order=order)

    # -- called by WorkflowContext ---------------------------------------------------------------
    async def append(
        self,
        family: Family,
        run: Run,
        rec: JournalRecord,
        *,
        label: str = "",
        key: str = "",
        order: Order = RECORD,
    ) -> JournalRecord:
        """Journal one record of `run` (`order`: see `World.append`); return it as a replay
        will read it. A finished run takes none (a replay would take it as running again)."""
        if run.finished:
            raise WorldError(f"run {run.id} has finished: no record is added to it")
        body = self._body(family, run, rec, label, key)
        [pos] = await self._append(family.root, [body], order)
        return family.apply(pos, _codec.decode(body))

    async def _append(self, root: str, bodies: list[bytes], order: Order) -> list[int]:
        """`World.append`, inline when it waits for nothing now (`World.append_waits`) or `io`
        would make it inline (`Placement.inline`), else where `io` makes calls."""
        store = self._store
        if not store.append_waits(root, order) or self._placement.inline(store.io, self._driving):
            return store.append(root, bodies, order)
        return await self.io(store.append, root, bodies, order)

    def append_now(self, family: Family, run: Run, rec: JournalRecord) -> JournalRecord:
        """`append` for callers that cannot await (on a network world it waits on the loop);
        what the run appended is durable first (a hook's record: deliveries may follow)."""
        body = self._body(family, run, rec, "", "")
        [pos] = self._store.append(family.root, [body], Order(streams=0))
        return family.apply(pos, _codec.decode(body))

    def _body(self, family: Family, run: Run, rec: JournalRecord, label: str, key: str) -> bytes:
        whole: JournalRecord = {"t": rec["t"], "run": run.id, "g": run.g, "at": self.world.now()}
        whole.update(rec)  # `t` first, then as `rec` has them: the stored form keeps the order
        stored = family.pack(whole, run.gen_at)
        try:  # (`_encode` inline, its names made only for an error: every record)
            return _codec.encode(stored)
        except SerializationError:
            raise _unserializable(stored, key, label or f"run {run.id}") from None

    async def start_child(
        self, family: Family, parent: Run, child_id: str, workflow: str, input: Any
    ) -> JournalRecord:
        """Journal a child start: the child's `start`, then the parent's `child` link.

        Both go in one write, start first, so whatever prefix a crash leaves is consistent: a
        lone `start` is an orphan that the parent adopts when its replay reaches this point
        again (the child id is derived, so it is the same), instead of starting it twice.
        """
        at = self.world.now()
        link: JournalRecord = {"run": parent.id, "g": parent.g, "at": at, "t": "child",
                "child": child_id, "workflow": workflow}  # fmt: skip
        bodies = [_codec.encode(family.pack(link, parent.gen_at))]
        orphan = family.runs.get(child_id)
        if orphan is None or orphan.parent != parent.id or orphan.workflow != workflow:
            inbox = family.inbox_state()
            start = self._start_record(child_id, workflow, input, parent.id, {}, inbox)
            start["at"] = at
            packed = family.pack(start, at)
            bodies.insert(0, self._encode(packed, "input", f"child of {parent.id}"))
        # Lazy: a replay that lost it starts the same child again (its id is derived), and
        # the child's first durable record covers it; the parent's replay re-runs the code
        # before this start, so its stream items can wait.
        positions = await self._append(family.root, bodies, LAZY)
        pairs = zip(positions, bodies, strict=True)
        return [family.apply(pos, _codec.decode(body)) for pos, body in pairs][-1]

    def claim_hook(self, family: Family, run: Run, token: str) -> None:
        """Claim `token` for `run`; a token left by a finished run is taken over."""
        owner = self.world.set_hook(token, run.id)
        if owner is not None and owner != run.id and self._is_finished(family, owner):
            owner = self.world.set_hook(token, run.id, holder=owner)
        if owner != run.id:
            raise HookConflictError(f"hook token {token!r} is owned by active run {owner}")

    def _is_finished(self, family: Family, run_id: str) -> bool:
        run = family.runs.get(run_id)
        if run is not None:
            return run.finished
        try:
            return self.info(run_id).finished
        except (RunNotFoundError, WorldError):
            return True

    def _start_record(
        self, run_id: str, workflow: str, input: Any, parent: str | None,
        meta: dict[str, Any], inbox: InboxState,
    ) -> JournalRecord:  # fmt: skip
        return {"run": run_id, "g": 0, "at": self.world.now(), "t": "start",
                "workflow": workflow, "input": input, "parent": parent, "meta": meta,
                "inbox": inbox, "nc": 0}  # fmt: skip

    @staticmethod
    def _encode(rec: StoredRecord, key: str, label: str) -> bytes:
        try:
            return _codec.encode(rec)
        except SerializationError:
            raise _unserializable(rec, key, label) from None


def _unserializable(rec: StoredRecord, key: str, label: str) -> SerializationError:
    """The error for record `rec` (of `label`) that does not encode, naming what in its
    field `key` (or its value's, `_value_key`) has no msgpack form."""
    key = key or _value_key(rec)
    root = {"ok": "result", "values": "payload"}.get(key, key or "value")
    path, reason = _codec.find_unserializable(rec.get(key), root)
    return SerializationError(f"{label}: cannot serialize {path}: {reason}", path)


def _value_key(rec: StoredRecord) -> str:
    for key in ("ok", "result", "input", "values"):
        if key in rec:
            return key
    return ""
