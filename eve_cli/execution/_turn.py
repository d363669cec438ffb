"""The turn workflow (``eve.turn``): one child run per turn, a loop of steps.

Between steps the turn takes deliveries from the session hook (steer folds a message in, queue
holds it for the next turn, cancel ends the turn). When a step leaves requests open (approval,
question, limit) the turn parks on the hook: no process, thread or memory stays behind, and a
delivery from any process wakes it where it stopped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from eve_cli._events import EventData, EventType
from eve_cli._keys import turn
from eve_cli._session import Delivered, Snapshot, SnapshotData, session_base
from eve_cli.execution._host import SessionHost
from eve_cli.execution._stored_events import EventReader
from eve_cli.execution._workflows import TurnInput, TurnResult
from eve_cli.harness import (
    admit_resolved,
    apply_delivery,
    cancel_pending,
    fold_message,
    run_step,
    unresolved,
    with_ids,
)
from world import STORAGE_ERRORS, HookHandle, WorkflowContext

if TYPE_CHECKING:
    from eve_cli.execution._executor import Executor

_log = logging.getLogger(__name__)

TASK_WAIT_ERROR = "a task cannot wait for input (approval or question); it fails instead"


async def turn_workflow(executor: Executor, ctx: WorkflowContext, data: TurnInput) -> TurnResult:
    """Run one turn; returns ``{"changes", "outcome"[, "text", "error", "handedBack"]}``
    (``changes``: the snapshot fields the turn changed; the driver has the rest)."""
    snap = turn_input(ctx, data["snap"])
    before = snap.copy()
    snap.turns += 1
    snap.turn_tokens, snap.turn_cost = snap.tokens, snap.cost  # the turn's budgets start here
    snap.repairs = 0
    keys = turn(snap.turns)
    try:
        agent = executor.session_agent(snap)
    except Exception as exc:
        host = SessionHost(executor, ctx, snap, executor.fallback_agent(), keys, before)
        host.emit("turn.started", {}, keys.start)
        return _finish(host, "failed", str(exc))
    host = SessionHost(executor, ctx, snap, agent, keys, before)
    if not ctx.is_replaying:  # a cancel signalled before this turn began is not for it
        executor.cancels.clear(snap.id)
    await host.load_keys()
    started: EventData = {"agentDigest": agent.digest} if agent.digest else {}
    if snap.parent is None and snap.agent_name and snap.agent_name != ctx.meta.get("agent"):
        started["agent"] = snap.agent_name  # moved: a fold from this turn on knows its agent
    host.emit("turn.started", started, keys.start)
    start = data["start"]
    snap.turn_schema = start.get("o")
    # The driver stored the message in history ("h"), and says its delivery id ("d").
    await host.read_ahead(start["h"])
    fold_message(host, "", keys.first, "started", None, start["h"], start.get("d"), start.get("b"))
    host.deferred.extend(start.get("e") or [])  # delivered with the message (`_driver`)
    return await _run(host, ctx)


async def _run(host: SessionHost, ctx: WorkflowContext) -> TurnResult:
    """The started turn's loop: deliveries, then a step, until it ends or fails; its result."""
    snap = host.snap
    hook = ctx.hook(snap.token) if snap.token else None
    # A sub-agent's turn watches the root session's hook: a cancel ends it, anything else it
    # takes is handed back to the parent turn with the result.
    watch = hook or (ctx.hook(snap.cancel_token) if snap.cancel_token else None)
    loop = _Deliveries(host, hook, watch)
    while True:
        # host.cancelled: the last step stopped its model call on a cancel signal.
        # A poll the turn may end or park after (its step asked for nothing more, or for an
        # answer): the step's events are readable before it looks (`_receipts`).
        if await loop.take(settled=not loop.fresh or bool(unresolved(host))) or host.cancelled:
            return await _cancel(host, loop.step, loop.cancel_by)
        if unresolved(host):
            if snap.mode == "task" or hook is None:
                return _finish(host, "failed", TASK_WAIT_ERROR)
            if await loop.wait_for_input(hook):
                return await _cancel(host, loop.step, loop.cancel_by)
            continue
        if not loop.fresh and not snap.pending:
            return _finish(host, "completed", None)
        result = await run_step(host, loop.step)
        loop.step += 1
        if result.outcome == "failed":
            return _finish(host, "failed", result.error)
        if result.outcome == "cancelled":
            # The cancel a step took is among the deliveries the loop applies next.
            host.cancelled = True
            continue
        loop.fresh = result.outcome != "done"


@dataclass
class _Deliveries:
    """What a turn's loop takes between its steps: ``hook`` the session's (None: a
    sub-agent's turn, which ``watch``es its root session's hook for a cancel)."""

    host: SessionHost
    hook: HookHandle | None
    watch: HookHandle | None
    step: int = 0  # the index of the next step
    taken: int = 0  # deliveries taken so far (their keys count them)
    fresh: bool = True  # new input since the last model answer
    cancel_by: Any = None  # who asked for the cancel taken (SPEC §18)

    async def take(self, *, settled: bool = False) -> bool:
        """Apply what was delivered since the last look; True when it asks for a cancel.
        ``settled``: the turn's events are readable before it looks (`HookHandle.poll`)."""
        host = self.host
        taken = host.take_deferred()
        if self.watch is not None:
            polled = await self.watch.poll(settled=settled)
            taken += with_ids(polled, self.watch.taken_ids)
        for payload in taken:
            if self.hook is not None and _answers_later(host, payload):
                host.deferred.append(payload)
                continue
            self.taken += 1
            if self.hook is None and payload.get("kind") != "cancel":
                host.handed_back.append(payload)
                continue
            # With a request still unanswered the turn is parked (a replay may take a message
            # here that first arrived while it waited): a message is queued, never folded
            # between a tool call and its result.
            effect = apply_delivery(
                host,
                payload,
                host.turn.delivery(self.taken),
                parked=bool(unresolved(host)),
                step=self.step,
            )
            if effect == "cancel":
                self.cancel_by = payload.get("b")
                return True
            self.fresh = self.fresh or effect == "steered"
        return False

    async def wait_for_input(self, hook: HookHandle) -> bool:
        """Park on ``hook`` for the next delivery (the turn's requests are unanswered) and
        apply it; True when it asks for a cancel."""
        host, snap = self.host, self.host.snap
        kinds = sorted({r["kind"] for r in unresolved(host)})
        host.emit(
            "turn.waiting",
            {"on": "input", "requests": kinds, "turns": snap.turns, "steps": snap.steps},
            host.turn.waiting(self.taken),
        )
        [payload] = with_ids([await hook.receive()], hook.taken_ids)
        self.taken += 1
        effect = apply_delivery(
            host, payload, host.turn.delivery(self.taken), parked=True, step=self.step
        )
        if effect == "cancel":
            self.cancel_by = payload.get("b")
        return effect == "cancel"


def turn_input(ctx: WorkflowContext, data: SnapshotData) -> Snapshot:
    """The snapshot a turn starts from: its input leaves out what equals the snapshot its
    driver's generation began with (the parent's input)."""
    session = ctx.run_id.rsplit(".", 1)[0]
    base = session_base(ctx.meta)
    return Snapshot.from_data(data, session, Snapshot.from_data(ctx.parent_input(), session, base))


def _answers_later(host: SessionHost, payload: Delivered) -> bool:
    """Whether ``payload`` answers only requests that are not open yet. A poll inside a step
    (an action boundary) may take, on a replay, an answer to a request that a later step of
    this very replay makes again (requests are not journaled): it is kept for then."""
    if payload.get("kind") != "responses":
        return False
    ids = {r.get("requestId") for r in payload.get("responses") or [] if isinstance(r, dict)}
    return bool(ids) and not ids & {r["requestId"] for r in host.snap.pending}


async def _cancel(host: SessionHost, index: int, by: Any = None) -> TurnResult:
    """End the turn as cancelled (``by``: who asked, kept in ``turn.cancelled``); open calls
    get a 'cancelled' result so history stays valid."""
    cancel_pending(host)
    await admit_resolved(host, index)
    host.executor.cancels.clear(host.snap.id)
    return _finish(host, "cancelled", None, by)


def _finish(
    host: SessionHost,
    outcome: Literal["completed", "failed", "cancelled"],
    error: str | None,
    by: Any = None,
) -> TurnResult:
    if host.snap.token:  # a session turn: messages a sub-agent handed back wait for next turn
        # (an answer kept for a request that never came again has nothing left to answer)
        kept = host.take_deferred()
        host.snap.queued.extend(p for p in kept if p.get("kind") not in ("cancel", "responses"))
    data: EventData = {}
    if error:
        data["error"] = error
    if isinstance(by, dict):
        data["by"] = by
    event: dict[str, EventType] = {
        "completed": "turn.completed",
        "failed": "turn.failed",
        "cancelled": "turn.cancelled",
    }
    host.emit(event[outcome], data, host.turn.end)
    _checkpoint(host)
    # Journaled three times (the turn's result, the driver's copy, the head): only what changed.
    result: TurnResult = {"outcome": outcome}
    if host.before is not None:
        result["changes"] = host.snap.changes_since(host.before)
    else:
        result["snap"] = host.snap.to_data()
    # Only a task's driver needs the final text (its result); a session's has it in history.
    if host.snap.mode == "task":
        result["text"] = host.last_text
    if error:
        result["error"] = error
    if handed := host.handed_back + host.take_deferred():
        result["handedBack"] = handed
    return result


def _checkpoint(host: SessionHost) -> None:
    """Checkpoint the session's fold at the turn's end (`ViewCache.checkpoint`): a root
    session's, written now (not replayed). The fold's state is a copy of what its events
    say: a failure to store it loses nothing (the next turn's end tries again)."""
    ctx, sid = host.ctx, host.snap.id
    if ctx.is_replaying or "." in sid or (end := host.emitted_index(host.turn.end)) is None:
        return
    reader = EventReader(host.executor.world, sid, lambda: dict(ctx.meta))
    try:
        host.executor.views.checkpoint(reader, end + 1)
    except STORAGE_ERRORS:
        raise
    except Exception as exc:  # a checkpoint it cannot make: the view folds more events
        _log.warning("session %s: no view checkpoint (%s: %s)", sid, type(exc).__name__, exc)
