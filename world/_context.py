"""What workflow code calls: `WorkflowContext` and the handles it returns.

Each operation first looks at the journal position it has reached: a recorded result is
returned as recorded (replay); past the end of the journal the operation runs for real and is
journaled before the workflow goes on. Waiting (hooks, timers, children) unwinds the workflow
coroutine with `_Park`, a BaseException, so nothing of the run stays in memory.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import datetime as dt
import hashlib
import inspect
import random
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ._errors import (
    STORAGE_ERRORS,
    ChildFailedError,
    DivergenceError,
    FatalError,
    HookConflictError,
    NoActiveRunError,
    StepFailedError,
    WorldError,
)
from ._family import Family, Run
from ._records import JournalRecord, RunError, Waiting
from ._store import LAZY, RECORD, Order, Scheduling
from ._world import InboxItem, check_name

if TYPE_CHECKING:
    from ._engine import Engine

T = TypeVar("T")
# Types the replay cursor matches against workflow calls; others are skipped.
COMMANDS = frozenset({"step", "attempt", "began", "prog", "hook", "recv", "sleep", "wake", "child"})


class _Park(BaseException):
    """Unwinds a workflow that must wait; carries what it waits on."""

    def __init__(self, waiting: Waiting) -> None:
        super().__init__(waiting)
        self.waiting = waiting


class _ContinueAsNew(BaseException):
    def __init__(self, input: Any) -> None:
        super().__init__()
        self.input = input


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failing step runs: `max_attempts` in all, with exponential backoff."""

    max_attempts: int = 3
    initial_delay: float = 0.1
    backoff: float = 2.0
    max_delay: float = 30.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        return min(self.initial_delay * self.backoff ** (attempt - 1), self.max_delay)


DEFAULT_RETRY = RetryPolicy()


class StepRun:
    """The step whose function is running, as its journal knows it (`current_step()`).

    A step started with ``tracked=True`` journals when each run of its function begins, so a
    run after a crash can tell it was interrupted (`interrupted`) and when the first run began
    (`began`); any step may journal its own progress (`record`), read back by every later run
    of it (`progress`).
    """

    def __init__(self, ctx: WorkflowContext, name: str) -> None:
        self._ctx, self.name = ctx, name
        self.attempt = 0  # the run of the function now: 1 for the first
        self.began: float | None = None  # set before the function runs
        self.interrupted = False
        self.progress: Any = None
        self.recorded = False

    def record(self, value: Any) -> None:
        """Journal `value` as this step's progress, durably before returning; a later run of
        the step (after a crash) reads it as `progress`. Callable from any thread."""
        ctx = self._ctx
        engine, family, run = ctx._engine, ctx._family, ctx._run
        stored = engine.append_now(family, run, {"t": "prog", "name": self.name, "v": value})
        engine._store.before_effect()  # a record deferred by the loop's thread is durable now
        ctx._advance(stored)
        self.progress, self.recorded = stored.get("v"), True


_current_step: contextvars.ContextVar[StepRun | None] = contextvars.ContextVar(
    "world_step", default=None
)


def current_step() -> StepRun | None:
    """The step whose function is running in this context (None outside a step function)."""
    return _current_step.get()


def _step_name(rec: JournalRecord) -> str:
    return f"step {rec.get('name')!r}"


# How a divergence error names a recorded command, by kind (others: by their kind).
_DESCRIBE: dict[str, Callable[[JournalRecord], str]] = {
    "step": _step_name,
    "attempt": _step_name,
    "began": _step_name,
    "prog": _step_name,
    "recv": lambda rec: f"receive on hook {rec.get('token')!r}",
    "child": lambda rec: f"child run of {rec.get('workflow')!r}",
}


def _describe(rec: JournalRecord) -> str:
    describe = _DESCRIBE.get(rec["t"])
    return describe(rec) if describe is not None else str(rec["t"])


class WorkflowContext:
    """The durable API a workflow function receives as its first argument."""

    def __init__(self, engine: Engine, family: Family, run: Run) -> None:
        self._engine, self._family, self._run = engine, family, run
        self._pos = 0
        self._now = run.gen_at
        self._uuids = 0
        self._random = random.Random(f"{run.id}:{run.g}")
        self._next_child = run.gen_nc
        self._parked: _Park | None = None
        self._empty_polls = 0  # polls that found nothing since the last record passed
        self._taken: list[int] = []  # the delivery ids the last receive or poll returned
        self._busy = ""  # the step whose function is running (replay order must be fixed)
        self._ended = False  # the workflow code returned or raised: nothing more is recorded
        # Hooks created whose claim and record wait for the run's next operation
        # (`_settle_hooks`): made then where the engine makes storage calls, before anything
        # else is stored.
        self._new_hooks: list[str] = []
        # Hooks closed, released likewise (before those claims) or when the
        # run parks or ends (`_release_closed`).
        self._closed_hooks: list[str] = []
        # Tokens `hook` handed out: each owner is looked up at the run's next operation (a
        # conflict is raised there).
        self._unchecked_hooks: list[str] = []

    # -- identity and determinism --------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self._run.id

    @property
    def generation(self) -> int:
        return self._run.g

    @property
    def meta(self) -> dict[str, Any]:
        """The meta the family's root run was started with (``engine.start(meta=)``): the
        same for every run of the family, and never changed."""
        root = self._family.runs.get(self._family.root)
        meta = root.meta if root is not None else self._family.head_runs.get(
            self._family.root, {}).get("meta")  # fmt: skip
        return dict(meta or {})

    def parent_input(self) -> Any:
        """The input of the parent's generation that started this run (what workflow code
        may leave out of a child's input). `WorldError` for a root run, or when the parent
        has moved on to a later generation since (its input is then another)."""
        run, family = self._run, self._family
        parent = family.runs.get(run.parent) if run.parent is not None else None
        if parent is None or run.start_pos < 0 or parent.gen_pos > run.start_pos:
            raise WorldError(
                f"run {run.id}: the input of the parent generation that started it is not known"
            )
        return copy.deepcopy(parent.input)  # the run keeps its own

    @property
    def is_replaying(self) -> bool:
        """True while the workflow is still reading recorded results."""
        return self._pos < len(self._run.records)

    def checkpoint(self) -> int | None:
        """A journal position to fork at (`Engine.fork(at=)`) that resumes this run here: the
        family's latest record, once this run has passed everything recorded of it (None
        while it replays: the latest record is then not where it stands). Every record the
        family holds up to it was written before this point of the run."""
        if self.is_replaying:
            return None
        return self._family.end

    def now(self) -> dt.datetime:
        """The time of the latest journal record the workflow has passed (UTC)."""
        return dt.datetime.fromtimestamp(self._now, dt.UTC)

    def uuid(self) -> uuid.UUID:
        """A UUID derived from the run id, generation and call count."""
        self._uuids += 1
        digest = hashlib.sha256(f"{self._run.id}:{self._run.g}:{self._uuids}".encode()).digest()
        return uuid.UUID(bytes=digest[:16], version=4)

    def random(self) -> float:
        """A float in [0, 1) from a generator seeded by the run id and generation."""
        return self._random.random()

    # -- cursor ----------------------------------------------------------------------------------
    def _check_alive(self) -> None:
        if self._parked is not None:
            raise self._parked  # code after a park must not touch the journal
        if self._busy:
            raise WorldError(
                f"run {self._run.id}: a durable operation started while step {self._busy!r} "
                "was running; operations of one run are sequential (use child runs for "
                "parallel work)"
            )

    def _next_command(self) -> JournalRecord | None:
        """The next recorded command; None past the end of the journal."""
        if self._parked is not None or self._busy:  # (`_check_alive`'s test inline)
            self._check_alive()  # raises
        records = self._run.records
        while self._pos < len(records) and records[self._pos].get("t") not in COMMANDS:
            self._pos += 1
        return records[self._pos] if self._pos < len(records) else None

    def _peek(self, kinds: set[str], actual: str) -> JournalRecord | None:
        """The next recorded command if it is one of `kinds`; None past the end."""
        rec = self._next_command()
        if rec is None:
            return None
        if rec.get("t") not in kinds:
            raise DivergenceError(self._run.id, self._pos, _describe(rec), actual)
        return rec

    def _advance(self, rec: JournalRecord) -> None:
        self._pos += 1
        self._now = rec.get("at", self._now)
        self._empty_polls = 0

    async def _record(
        self, rec: JournalRecord, *, label: str = "", order: Order = RECORD
    ) -> JournalRecord:
        """Journal a command (`order`: see `Scheduling.append`). Stream items appended by workflow
        code before it are appended again by the replay of this generation (callers
        deduplicate), so they need not be durable before it; only those a step function
        appended (`Order.streams`, from the step's `stream_mark`), which a replay does not
        re-run, are made durable before that step's record. The engine covers all of them
        before a run finishes or continues as new."""
        if self._ended:
            raise WorldError(
                f"run {self._run.id}: {label or rec['t']!r} ended after the workflow code had "
                "returned or raised (an operation it left running, as asyncio.gather leaves "
                "the others when one fails); it was not recorded"
            )
        if self._new_hooks or self._closed_hooks or self._unchecked_hooks:  # (`_hooks_due`
            await self._settle_hooks()  # inline: this runs at every record)
        stored = await self._engine.append(self._family, self._run, rec, label=label, order=order)
        self._advance(stored)
        return stored

    @property
    def _hooks_due(self) -> bool:
        """Whether hook work waits for the next operation (`_settle_hooks`)."""
        return bool(self._new_hooks or self._closed_hooks or self._unchecked_hooks)

    async def _settle_hooks(self) -> None:
        """Claim and record the hooks `create_hook` left to this moment, in order, off the
        loop (`HookConflictError` for one another active run owns); the hooks `close` left
        are released first (a token closed, then created again, is claimed after)."""
        await self._release_closed()
        while self._new_hooks:
            token = self._new_hooks.pop(0)
            await self._engine.io(self._claim_now, token)
        while self._unchecked_hooks:
            token = self._unchecked_hooks.pop(0)
            self._check_owner(token, await self._engine.io(self._engine.world.hook_owner, token))

    async def _release_closed(self) -> None:
        while self._closed_hooks:
            token = self._closed_hooks.pop(0)
            await self._engine.io(self._engine.world.set_hook, token, None, holder=self._run.id)

    def _claim_now(self, token: str) -> None:
        self._engine.claim_hook(self._family, self._run, token)
        rec: JournalRecord = {"t": "hook", "token": token}
        self._advance(self._engine.append_now(self._family, self._run, rec))

    def _park(self, waiting: Waiting) -> _Park:
        self._parked = _Park(waiting)
        return self._parked

    # -- steps -----------------------------------------------------------------------------------
    @overload
    async def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        retry: RetryPolicy | None = None,
        ordered: bool = True,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        retry: RetryPolicy | None = None,
        ordered: bool = True,
        **kwargs: Any,
    ) -> T: ...

    async def step(
        self,
        name: str,
        fn: Callable[..., T | Awaitable[T]],
        *args: Any,
        retry: RetryPolicy | None = None,
        ordered: bool = True,
        tracked: bool = False,
        **kwargs: Any,
    ) -> T:
        """Run `fn` once, durably: replay returns (or raises) the recorded outcome.

        The stream items appended before it are written before `fn` runs, so whoever sees
        its effects can read them, and every record before it is durable; ``ordered=False``
        (for a function no one observes, such as a request to a model) leaves the items and
        the records before it to be written and made durable a moment later or by the next
        ordered step, whichever comes first (see `Scheduling.before_effect`). ``tracked``: each
        run of `fn` is journaled (durably) before it begins, so a run after a crash knows
        the one before was interrupted (`current_step().interrupted`). `fn` may journal
        progress (`StepRun.record`).
        """
        if self._new_hooks or self._closed_hooks or self._unchecked_hooks:  # `_hooks_due`
            await self._settle_hooks()  # claimed before `fn` runs
        run = StepRun(self, name)
        done = self._replay_step(run)
        if done is not None:
            return self._outcome(done)  # type: ignore[no-any-return]
        policy = retry or DEFAULT_RETRY
        store = self._engine._store
        while True:
            run.attempt += 1
            mark = store.stream_mark()
            if tracked:
                rec = await self._record({"t": "began", "name": name, "n": run.attempt})
                run.began = rec["at"] if run.began is None else run.began
            # Its effects come after every record before them is durable, and whoever sees
            # them can read what was appended before. A function no one observes may begin
            # first (a local world's fsync then overlaps it, or is shared with its record).
            self._busy = name  # from here: the step may wait (for its effect's order too)
            try:
                await self._engine.before_effect(observed=ordered)
            except BaseException:
                self._busy = ""
                raise
            if run.began is None:
                run.began = time.time()
            token = _current_step.set(run)
            try:
                value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
            except STORAGE_ERRORS:
                raise  # the store's failure, not the step's: the drive stops, resumed later
            except Exception as exc:
                self._busy, run.interrupted = "", False
                order = _own(store, mark, ordered)
                await self._failed(run, exc, policy, order)  # raises at the last
                continue
            finally:
                self._busy = ""
                _current_step.reset(token)
            rec = {"t": "step", "name": name, "ok": value, "n": run.attempt}
            order = _own(store, mark, ordered)
            stored = await self._record(rec, label=f"step {name!r}", order=order)
            return stored["ok"]  # type: ignore[no-any-return]

    async def _failed(self, run: StepRun, exc: Exception, policy: RetryPolicy, own: Order) -> None:
        """Journal a failed run of a step (`own`: what it appended): raise its
        `StepFailedError` when it was fatal or the last attempt, else wait out the delay."""
        error: RunError = {"type": type(exc).__name__, "message": str(exc)}
        fatal = isinstance(exc, FatalError)
        if fatal or run.attempt >= max(policy.max_attempts, 1):
            end: JournalRecord = {
                "t": "step", "name": run.name, "err": error, "n": run.attempt, "fatal": fatal
            }  # fmt: skip
            self._outcome(await self._record(end, order=own))  # raises: the record has `err`
        attempt: JournalRecord = {
            "t": "attempt", "name": run.name, "n": run.attempt, "err": error
        }  # fmt: skip
        await self._record(attempt, order=own)
        self._busy = run.name
        await asyncio.sleep(policy.delay(run.attempt))

    def _replay_step(self, run: StepRun) -> JournalRecord | None:
        """Pass the step's records in the journal: its result record if it finished, else
        None with what the earlier runs left (attempts, when the first began, progress)
        folded into `run`."""
        actual = f"step {run.name!r}"
        while (rec := self._peek({"step", "attempt", "began", "prog"}, actual)) is not None:
            if rec.get("name") != run.name:
                raise DivergenceError(self._run.id, self._pos, _describe(rec), actual)
            self._advance(rec)
            kind = rec["t"]
            if kind == "step":
                return rec
            if kind == "began":
                run.began = rec["at"] if run.began is None else run.began
                run.attempt = rec.get("n", run.attempt + 1)
                run.interrupted = True  # until an `attempt` says how that run ended
            elif kind == "prog":
                run.progress, run.recorded, run.interrupted = rec.get("v"), True, True
            else:
                run.attempt, run.interrupted = rec.get("n", run.attempt + 1), False
        return None

    def _outcome(self, rec: JournalRecord) -> Any:
        if "err" in rec:
            err = rec["err"]
            raise StepFailedError(
                rec["name"], err.get("type", ""), err.get("message", ""), rec.get("n", 1)
            )
        return rec.get("ok")

    # -- hooks -----------------------------------------------------------------------------------
    def create_hook(self, token: str | None = None) -> HookHandle:
        """Claim a hook token (random, 192 bits, unless given) for this run.

        `await ctx.create_hook(...)` is the same handle, claimed by then: the claim waits for
        that (or the run's next operation), and a conflict (`HookConflictError`) is raised
        there."""
        rec = self._peek({"hook"}, "create_hook")
        if rec is not None:
            if token is not None and rec.get("token") != token:
                raise DivergenceError(
                    self._run.id, self._pos, f"hook {rec.get('token')!r}", f"hook {token!r}"
                )
            self._advance(rec)
            return HookHandle(self, rec["token"])
        token = check_name(token, "hook token") if token is not None else secrets.token_urlsafe(24)
        # Its claim and record are made when the handle is awaited or at the run's next
        # operation, whichever comes first (where the engine makes storage calls).
        self._new_hooks.append(token)
        return HookHandle(self, token)

    def hook(self, token: str) -> HookHandle:
        """A handle to a hook owned by this run or one of its ancestors."""
        self._check_alive()
        if token in self._new_hooks:  # this run's, claimed at its next operation
            return HookHandle(self, token)
        check_name(token, "hook token")
        self._unchecked_hooks.append(token)  # looked up at the run's next operation
        return HookHandle(self, token)

    def _check_owner(self, token: str, owner: str | None) -> None:
        """Raise unless `owner` (of `token`) is this run or one of its ancestors."""
        if owner is None:
            raise NoActiveRunError(token)
        run_id = self._run.id
        if not (run_id == owner or run_id.startswith(owner + ".")):
            raise HookConflictError(
                f"hook {token!r} belongs to run {owner}, not to {run_id} or its ancestors"
            )

    async def _receive(self, token: str, until: dt.datetime | None = None) -> Any:
        if self._hooks_due:
            await self._settle_hooks()
        what = f"receive on hook {token!r}"
        deadline = None
        if until is not None:  # the deadline is journaled: a replay waits for the same one
            rec = self._peek({"sleep"}, what)
            if rec is None:
                rec = await self._record({"t": "sleep", "until": _timestamp(until)})
            else:
                self._advance(rec)
            deadline = float(rec["until"])
        rec = self._peek({"recv", "wake"} if deadline is not None else {"recv"}, what)
        if rec is not None:
            if rec.get("t") == "wake":
                self._advance(rec)
                raise TimeoutError(f"nothing delivered to hook {token!r} by its deadline")
            if "lost" in rec:
                raise self._family.lost_error(rec)
            if rec.get("token") != token or rec.get("poll"):
                raise DivergenceError(self._run.id, self._pos, _describe(rec), what)
            self._advance(rec)
            self._taken = list(rec.get("ids", []))
            return rec.get("values", [None])[0]
        items = await self._pending(token, 1)
        if items:
            return (await self._take(token, items))[0]
        if deadline is None:
            raise self._park({"hook": token})
        if self._engine.world.now() < deadline:
            raise self._park({"hook": token, "timer": deadline})
        await self._record({"t": "wake"})
        raise TimeoutError(f"nothing delivered to hook {token!r} by its deadline")

    async def _poll(self, token: str, settled: bool = False) -> list[Any]:
        # An empty poll records nothing (it runs at every step boundary of a turn). A poll
        # that took payloads records how many empty polls came before it since the last
        # record, so a replay returns [] to exactly those and the payloads to this one.
        if self._new_hooks or self._closed_hooks or self._unchecked_hooks:  # (`_hooks_due`)
            await self._settle_hooks()
        rec = self._next_command()
        if rec is not None:
            if rec.get("t") == "recv" and "lost" in rec:
                raise self._family.lost_error(rec)
            mine = rec.get("t") == "recv" and rec.get("poll") and rec.get("token") == token
            if mine and rec.get("skip", 0) == self._empty_polls:
                self._advance(rec)
                self._taken = list(rec.get("ids", []))
                return list(rec.get("values", []))
            self._empty_polls += 1
            self._taken = []
            return []
        if settled:
            await self._engine.before_effect(observed=True)
        items = await self._pending(token, None)
        if not items:
            self._empty_polls += 1
            self._taken = []
            return []
        return await self._take(token, items, self._empty_polls)

    async def _pending(self, token: str, limit: int | None) -> list[InboxItem]:
        family, world = self._family, self._engine.world
        items = family.take(token, limit)
        known = self._engine._store.known_inbox_end(family.root)
        if not items and not family.inbox_unchanged(known):
            read = await self._engine.off_loop(family.read_inbox, world)
            if read:
                items = family.take(token, limit)
        return items

    async def _take(self, token: str, items: list[InboxItem], poll: int | None = None) -> list[Any]:
        """JournalRecord taking `items`; `poll`: by a poll, after that many empty ones."""
        ids = [i.id for i in items]
        values = [i.payload for i in items]
        rec: JournalRecord = {"t": "recv", "token": token, "ids": ids, "values": values}
        if poll is not None:
            rec["poll"], rec["skip"] = True, poll
        # No fsync of its own: a replay that lost it takes the same deliveries again (they
        # stay in the inbox), and the next durable record of the family covers it.
        stored = await self._record(rec, order=LAZY)
        self._family.consume(ids)
        self._taken = ids
        return list(stored["values"])

    # -- time ------------------------------------------------------------------------------------
    async def sleep(self, seconds: float) -> None:
        """Wait durably for `seconds` (measured from `now()`)."""
        await self.sleep_until(self.now() + dt.timedelta(seconds=max(seconds, 0.0)))

    async def sleep_until(self, when: dt.datetime) -> None:
        """Wait durably until `when` (naive datetimes are taken as UTC)."""
        if self._hooks_due:
            await self._settle_hooks()
        rec = self._peek({"sleep"}, "sleep")
        if rec is None:
            rec = await self._record({"t": "sleep", "until": _timestamp(when)})
        else:
            self._advance(rec)
        until = rec["until"]
        if self._peek({"wake"}, "sleep") is not None:
            self._advance(self._run.records[self._pos])
            return
        if self._engine.world.now() < until:
            raise self._park({"timer": until})
        await self._record({"t": "wake"})

    # -- children --------------------------------------------------------------------------------
    async def start_child(self, workflow: str, input: Any = None) -> ChildHandle:
        """Start a child run in this family; it runs once this run waits or finishes."""
        if self._hooks_due:
            await self._settle_hooks()
        actual = f"child run of {workflow!r}"
        rec = self._peek({"child"}, actual)
        self._next_child += 1
        if rec is not None:
            if rec.get("workflow") != workflow:
                raise DivergenceError(self._run.id, self._pos, _describe(rec), actual)
            self._advance(rec)
            return ChildHandle(self, rec["child"])
        child_id = f"{self._run.id}.{self._next_child - 1}"
        stored = await self._engine.start_child(self._family, self._run, child_id, workflow, input)
        self._advance(stored)
        return ChildHandle(self, child_id)

    async def run_child(self, workflow: str, input: Any = None) -> Any:
        """Start a child run and wait for its result."""
        handle = await self.start_child(workflow, input)
        return await handle.result()

    def _child_result(self, child_id: str) -> Any:
        # Nothing is recorded: a child's end is in the journal, durable before the parent can
        # see it, and final, so a replay observes the same outcome at the same point.
        self._check_alive()
        child = self._family.runs.get(child_id)
        if child is None or not child.finished:
            raise self._park({"child": child_id})
        error, result = child.error, child.result
        if error is not None:
            raise ChildFailedError(child_id, error.get("type", ""), error.get("message", ""))
        return result

    # -- generations -----------------------------------------------------------------------------
    def continue_as_new(self, input: Any = None) -> None:
        """End this generation; the run restarts with `input` and an empty history."""
        self._check_alive()
        raise _ContinueAsNew(input)


def _timestamp(when: dt.datetime) -> float:
    """Seconds since the epoch (a naive datetime is taken as UTC)."""
    return (when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)).timestamp()


def _own(store: Scheduling, mark: int, ordered: bool) -> Order:
    """A step record's order: the stream items its function appended (after `mark`) are
    durable before it; a step that appended none waits for none."""
    if store.stream_mark() == mark:
        return RECORD
    return Order(streams=mark, unobserved=not ordered)


class HookHandle:
    """A claimed hook token: receive payloads delivered with `resume_hook(token, ...)`."""

    def __init__(self, ctx: WorkflowContext, token: str) -> None:
        self._ctx, self.token = ctx, token

    def __await__(self) -> Generator[Any, None, HookHandle]:
        return self._claimed().__await__()

    async def _claimed(self) -> HookHandle:
        if self._ctx._hooks_due:
            await self._ctx._settle_hooks()
        return self

    async def receive(
        self, *, timeout: float | None = None, until: dt.datetime | None = None
    ) -> Any:
        """The next payload; parks the run until one arrives. With a deadline (`timeout`
        seconds from `now()`, or `until`) the run parks on the hook and a durable timer at
        once, and `TimeoutError` is raised if nothing arrived by then."""
        if timeout is not None:
            until = self._ctx.now() + dt.timedelta(seconds=max(timeout, 0.0))
        return await self._ctx._receive(self.token, until)

    async def poll(self, *, settled: bool = False) -> list[Any]:
        """Every pending payload, without waiting (may be empty). `settled`: what the run
        appended before (records, stream items) is made durable and readable first, as
        before an observed effect (one commit when anything waits): for a poll the run may
        stop after without another, so one who delivers after it and reads the run's
        streams sees everything that came before it."""
        return await self._ctx._poll(self.token, settled)

    @property
    def taken_ids(self) -> list[int]:
        """The delivery ids (`Engine.deliver`) of what the run's last `receive` or `poll`
        returned, in order; the same on a replay."""
        return list(self._ctx._taken)

    def close(self) -> None:
        """Release the token; later deliveries to it raise `NoActiveRunError` (on a network
        world: from the run's next operation on, or once it parks or ends, the release being
        a round trip made then, where `Engine.io` says)."""
        ctx = self._ctx
        ctx._check_alive()
        if self.token in ctx._new_hooks:  # never claimed: nothing to release
            ctx._new_hooks.remove(self.token)
            return
        if self.token in ctx._unchecked_hooks:  # released now: its lookup would find no owner
            ctx._unchecked_hooks.remove(self.token)
        ctx._closed_hooks.append(self.token)  # released at the run's next operation
        ctx._run.hooks.discard(self.token)


class ChildHandle:
    """A started child run."""

    def __init__(self, ctx: WorkflowContext, run_id: str) -> None:
        self._ctx, self.run_id = ctx, run_id

    async def result(self) -> Any:
        """The child's result; parks this run until the child finishes."""
        return self._ctx._child_result(self.run_id)
