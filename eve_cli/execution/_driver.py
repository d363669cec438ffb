"""The session driver workflow (``eve.session``): one long-lived run per session.

Generation 0 claims the session's continuation-token hook (single owner: a competing claim
fails the session clearly). Each generation takes one delivery (a queued one first, else it
parks on the hook), runs a turn as a child run or a session operation (clear, compact,
reset), then continues as new with the small snapshot — so resuming never replays the
session's age. A task session (a sub-agent, or ``mode="task"``) runs one turn and ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eve_cli._events import EventData
from eve_cli._keys import SESSION_END, SESSION_START, generation, turn
from eve_cli._session import Delivered, Snapshot, SnapshotData, session_base
from eve_cli.execution._host import SessionHost
from eve_cli.execution._stored_events import started_event
from eve_cli.execution._workflows import (
    TURN_WORKFLOW,
    SessionResult,
    TurnInput,
    TurnResult,
    TurnStart,
)
from eve_cli.harness import compact, with_ids
from eve_cli.models import Message
from world import STORAGE_ERRORS, HookConflictError, HookHandle, WorkflowContext

if TYPE_CHECKING:
    from eve_cli.execution._executor import Executor


async def session_workflow(
    executor: Executor, ctx: WorkflowContext, data: SnapshotData
) -> SessionResult | None:
    snap = Snapshot.from_data(data, ctx.run_id, session_base(ctx.meta))
    origin = snap.copy()  # as this generation began: its turn's input leaves out the same
    # Loaded when first needed: the driver's replays at every turn mostly do not need it.
    host = SessionHost(executor, ctx, snap, lambda: executor.agent_or_fallback(snap))
    await host.load_keys()
    try:
        hook = await _open_hook(host, ctx)
    except HookConflictError as exc:
        host.emit("session.failed", {"error": str(exc)}, SESSION_END)
        return {"status": "failed", "error": str(exc)}
    payload = await _next_delivery(host, ctx, hook)
    if payload is None:
        return {"status": "failed", "error": "session has nothing to do"}
    if payload.get("kind") == "message":
        result = await _run_turn(host, ctx, payload, origin)
        snap = host.snap = turn_snapshot(snap, result)  # snap is what the turn started from
        if snap.mode == "task":
            return _end_task(host, result)
    else:
        await _operate(host, payload)
    snap.gen += 1
    ctx.continue_as_new(snap.to_data(session_base(ctx.meta)))
    return None


async def _open_hook(host: SessionHost, ctx: WorkflowContext) -> HookHandle | None:
    """The session's hook (None: a session without one, a sub-agent's): claimed by generation
    0 after its ``session.started`` (a competing claim raises ``HookConflictError``)."""
    snap = host.snap
    if snap.gen != 0:
        return ctx.hook(snap.token) if snap.token else None
    if snap.created_at == 0.0:
        snap.created_at = host.now()
    host.emit("session.started", started_event(snap, host.agent.name), SESSION_START)
    # Off the loop if it waits.
    return await ctx.create_hook(token=snap.token) if snap.token else None


async def _next_delivery(
    host: SessionHost, ctx: WorkflowContext, hook: HookHandle | None
) -> Delivered | None:
    """What this generation does: a task's message, a queued delivery, else the next one
    from the hook (parked on it); None when there is nothing to wait for."""
    snap = host.snap
    if snap.task is not None and snap.gen == 0:
        return {"kind": "message", "text": snap.task}
    if snap.queued:
        return snap.queued.pop(0)
    if hook is None:
        return None
    counts: EventData = {"turns": snap.turns, "steps": snap.steps}
    if snap.token is not None and snap.token != ctx.meta.get("token"):  # else it is the meta's
        counts = {"continuationToken": snap.token, "turns": snap.turns, "steps": snap.steps}
    host.emit("session.waiting", counts, generation(snap.gen).waiting)
    payload = with_ids([await hook.receive()], hook.taken_ids)[0]
    if payload.get("kind") != "message":
        return payload
    # What else waits (an empty look records nothing). A move delivered after the message
    # comes first: the message was not taken yet, so the agent it moves to takes it (and
    # what came with it, each its own turn). Anything else goes to the turn, which takes it
    # at its first step as it would have taken it from the hook.
    rest = with_ids(await hook.poll(), hook.taken_ids)
    moves = [p for p in rest if p.get("kind") == "move"]
    if moves:
        snap.queued = [*moves, payload, *(p for p in rest if p.get("kind") != "move")]
        return snap.queued.pop(0)
    if rest:
        payload["e"] = rest
    return payload


async def _run_turn(
    host: SessionHost, ctx: WorkflowContext, payload: Delivered, origin: Snapshot
) -> TurnResult:
    """The result of the turn a delivered message starts (a child run)."""
    snap = host.snap
    try:
        start = take_message(host, payload)
        turn: TurnInput = {"snap": snap.to_data(origin), "start": start}
        result: TurnResult = await ctx.run_child(TURN_WORKFLOW, turn)
    except STORAGE_ERRORS:
        raise  # the store's, not the turn's: the drive stops, the turn resumes later
    except Exception as exc:
        failed: EventData = {"error": f"{type(exc).__name__}: {exc}"}
        host.emit("turn.failed", failed, generation(snap.gen).turn_failed)
        result = {"outcome": "failed", "error": str(exc)}
    return result


async def _operate(host: SessionHost, payload: Delivered) -> None:
    """A session operation between turns: ``clear``, ``reset``, ``compact`` or ``move`` (its
    ``b``: who asked, kept in its event)."""
    snap = host.snap
    keys = generation(snap.gen)
    kind, by = payload.get("kind"), payload.get("b")
    who: EventData = {"by": by} if isinstance(by, dict) else {}
    if kind == "clear":
        _clear(snap)
        host.emit("context.cleared", who, keys.cleared)
    elif kind == "reset":
        _clear(snap)
        snap.state = {}
        snap.approved_tools = []
        snap.queued = []
        host.emit("context.cleared", {"reset": True, **who}, keys.cleared)
    elif kind == "compact":
        await compact(host, keys.compaction, None, estimate=None, force=True)
    elif kind == "move" and isinstance(agent := payload.get("agent"), str):
        moved: EventData = {"agent": agent, "previous": snap.agent_name, **who}
        snap.agent_name = agent  # its next turns run that agent
        if isinstance(payload.get("agentDir"), str):
            snap.agent_dir = payload["agentDir"]
        host.emit("session.moved", moved, keys.moved)


def take_message(host: SessionHost, payload: Delivered) -> TurnStart:
    """The start of a turn for a delivered message: the message goes into the history stream
    here (under the key the turn would use), and the turn gets its index (``h``) and its
    delivery id (``d``) alone (earlier turns got the payload's other fields, never read)."""
    snap = host.snap
    message: Message = {"role": "user", "content": str(payload.get("text", ""))}
    start: TurnStart = {"h": host.append_history(message, turn(snap.turns + 1).first.user)}
    if isinstance(payload.get("d"), int):
        start["d"] = payload["d"]  # its delivery id, for the message.received event
    if isinstance(payload.get("b"), dict):
        start["b"] = payload["b"]  # who sent it (SPEC §18)
    if isinstance(payload.get("outputSchema"), dict):
        start["o"] = payload["outputSchema"]  # this turn's answer follows it
    if isinstance(payload.get("e"), list):
        start["e"] = payload["e"]  # taken with it: the turn applies them at its first step
    return start


def turn_snapshot(before: Snapshot, result: TurnResult) -> Snapshot:
    """The session after a turn: its result carries the changed fields (``changes``), or
    none (it failed before changing anything)."""
    return before.patched(result.get("changes") or {})


def _clear(snap: Snapshot) -> None:
    snap.history_start = snap.history_len
    snap.summary_at = None


def _end_task(host: SessionHost, result: TurnResult) -> SessionResult:
    outcome = result["outcome"]
    status = outcome
    if status == "completed":
        host.emit("session.completed", {"output": result.get("text", "")}, SESSION_END)
    elif status == "failed":
        host.emit("session.failed", {"error": result.get("error")}, SESSION_END)
    else:
        host.emit("session.cancelled", {}, SESSION_END)
    return {
        "status": status,
        "text": result.get("text", ""),
        "error": result.get("error"),
        "handedBack": result.get("handedBack", []),
    }
