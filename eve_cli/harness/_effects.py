"""A tool call that runs again after a crash: declared side effects (``@tool(effects=)``), a
timeout that counts across restarts, the progress a tool records, and the "outcome unknown"
request (SPEC §16).

A call is one durable action (D2). The action of an ``unsafe`` tool, or of one with a
``timeout``, is *tracked*: the journal holds when each run of it began, durably before the tool
starts. So a run after a crash knows an earlier one was interrupted and when the first began.
An ``unsafe`` call interrupted without recorded progress does not run again: its action
journals "unknown" and the turn parks on an ``outcome`` request (run it again, treat it as
failed, or give its result). A tool that recorded progress (``ctx.record_progress``) runs again
with it (``ctx.recorded_progress``, ``ctx.resumed``) whatever its effects.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from eve_cli._agent_api import ToolContext, bind_state, unbind_state
from eve_cli._json import JSONObject
from eve_cli._session import InputResponse, PendingRequest, Resolution, requested_event
from eve_cli._text import repaired
from eve_cli._tool_threads import QUICK_WAIT
from eve_cli._tools import Tool
from eve_cli.harness._host import StepHost
from eve_cli.harness._outcome import ToolCallRecord, ToolOutcome

OUTCOME = "outcome"  # the kind of input request for a call whose outcome is unknown
RERUN, FAILED, RESULT = "rerun", "failed", "result"
ANSWERS = (RERUN, FAILED, RESULT)
TREATED_AS_FAILED = (
    "This call was interrupted (eve stopped while it ran) and whether it took effect is "
    "unknown; the user chose to treat it as failed."
)


def is_tracked(tool: Tool) -> bool:
    """Whether a call's runs are journaled as they begin (costs one durable record a call)."""
    return tool.effects == "unsafe" or tool.timeout is not None


def action_name(call_id: str, attempt: int) -> str:
    """The durable action of run ``attempt`` of a call (a rerun the user asked for is new)."""
    return f"tool:{call_id}" if attempt == 1 else f"tool:{call_id}:{attempt}"


def tool_function(
    host: StepHost,
    tool: Tool,
    call: ToolCallRecord,
    ctx: ToolContext,
    checked: JSONObject | None,
) -> Callable[[], Awaitable[ToolOutcome]]:
    """The function of a call's action: its result as journaled (``{"unknown": True}`` for
    an interrupted ``unsafe`` call, which does not run)."""
    before = dict(host.snap.state)

    async def execute() -> ToolOutcome:
        run = host.running_action()
        ctx.resumed, ctx.recorded_progress, ctx.recorder = (
            run.interrupted,
            run.progress,
            run.record,
        )
        if tool.effects == "unsafe" and run.interrupted and not run.recorded:
            return {"unknown": True}
        remaining = None
        if tool.timeout is not None:  # counted from the first run: a resumed call gets the rest
            remaining = tool.timeout - (time.time() - (run.began or time.time()))
            if remaining <= 0:
                return {"content": tool.timed_out(), "isError": True, "durationMs": 0}
        values = dict(before)
        token = bind_state(values)
        began = time.monotonic()
        try:
            result = await tool.execute(
                call["arguments"],
                ctx,
                wait=QUICK_WAIT if host.solo() else 0.0,
                checked=checked,
                remaining=remaining,
            )
        finally:
            unbind_state(token)
            ctx.recorder = None
        outcome: ToolOutcome = {
            "content": result.content,
            "isError": result.is_error,
            "state": values if values != before else None,
            "progress": ctx.progress_messages,
            # Journaled with the result, so a replay reports the duration of the real run.
            "durationMs": round((time.monotonic() - began) * 1000),
            **({"extra": result.extra} if result.extra else {}),
        }
        return repaired(outcome, f"tool {tool.name!r}")  # type: ignore[no-any-return]

    return execute


def outcome_request(host: StepHost, index: int, call: ToolCallRecord, attempt: int) -> None:
    """Park the call on an ``outcome`` request: its run ``attempt`` was interrupted."""
    keys = host.turn.tool(call["id"]).outcome(attempt)
    request: PendingRequest = {
        "requestId": keys.id,
        "kind": OUTCOME,
        "callId": call["id"],
        "tool": call["name"],
        "arguments": call["arguments"],
        "message": (
            f"eve stopped while {call['name']} was running; whether it took effect is unknown"
        ),
        "attempt": attempt,
        "step": index,
    }
    host.snap.pending.append(request)
    host.emit("input.requested", requested_event(request), keys.requested, index)


def outcome_answer(response: InputResponse) -> Resolution | None:
    """The resolution an answer to an ``outcome`` request gives (None: not such an answer):
    ``{"outcome": "rerun"}``, ``{"outcome": "failed"}`` or ``{"outcome": "result", "result":
    text}``."""
    answer = response.get("outcome")
    if answer == RESULT and isinstance(response.get("result"), str):
        return {"outcome": RESULT, "result": response["result"]}
    if answer in (RERUN, FAILED):
        return {"outcome": answer}
    return None


def answer_problem(response: InputResponse) -> str | None:
    """What is wrong with an answer to an ``outcome`` request (None: nothing)."""
    if outcome_answer(response) is not None:
        return None
    return (
        "answer it with outcome: 'rerun' (run the call again), 'failed' (treat it as failed) "
        "or 'result' together with result: the call's result as text"
    )
