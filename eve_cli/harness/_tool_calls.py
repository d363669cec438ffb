"""A step's tool calls: each run, rejected or parked for an answer (approval, question) by
its validity and approval policy, and its result recorded for the model and the events.
What a call may do when it runs again after a crash is `_effects`; the sleep tool `_sleep`."""

from __future__ import annotations

from eve_cli._agent_api import ToolContext
from eve_cli._events import EventData
from eve_cli._json import JSONObject
from eve_cli._session import PendingRequest, requested_event
from eve_cli._tools import ASK_QUESTION, SLEEP, InvalidArguments, Tool, ToolExtra
from eve_cli.harness._effects import (
    OUTCOME,
    RERUN,
    RESULT,
    TREATED_AS_FAILED,
    action_name,
    is_tracked,
    outcome_request,
    tool_function,
)
from eve_cli.harness._host import StepHost
from eve_cli.harness._limits import grant_more
from eve_cli.harness._outcome import AnsweredCall, ToolCallRecord, ToolOutcome
from eve_cli.harness._sleep import sleep_call
from eve_cli.models import Message

CANCELLED_CALL = "The turn was cancelled."  # the result of a call that never ran


async def dispatch_call(host: StepHost, index: int, call: AnsweredCall) -> None:
    """Run, reject or park one tool call according to its validity and approval policy."""
    name, arguments = call["name"], call["arguments"]
    tool = host.find_tool(name)
    if arguments is None:
        why = call.get("error") or "arguments could not be parsed"
        record_result(host, index, call, f"Invalid arguments for tool {name!r}: {why}", True)
        return
    if name in host.agent.subagents:
        task = arguments.get("task")
        if not isinstance(task, str):
            record_result(host, index, call, "Invalid arguments: 'task' must be a string", True)
            return
        result = await host.run_subagent(name, task, call["id"], index)
        record_result(host, index, call, result["content"], result["isError"])
        return
    if tool is None:
        known = ", ".join(sorted([*host.agent.tools, *host.agent.subagents]))
        record_result(host, index, call, f"Unknown tool {name!r}; available: {known}", True)
        return
    try:
        checked = tool.validate(arguments)
    except InvalidArguments as exc:
        record_result(host, index, call, f"Invalid arguments for tool {name!r}: {exc}", True)
        return
    if tool.fn is None and name in (ASK_QUESTION, SLEEP):
        await builtin_call(host, index, call)
        return
    try:
        decision = tool.approval.decide(arguments, approved_before=name in host.snap.approved_tools)
    except Exception as exc:
        record_result(host, index, call, f"Approval policy failed: {exc}", True)
        return
    if decision == "approved":
        await run_tool(host, index, call, tool, checked)
    elif decision == "denied":
        record_result(host, index, call, "The approval policy denied this call.", True, "rejected")
    else:
        park_call(host, index, call, "approval")


async def builtin_call(host: StepHost, index: int, call: ToolCallRecord) -> None:
    """A call of a built-in tool: ``ask_question`` parks, ``sleep`` waits (``_sleep``)."""
    if call["name"] == ASK_QUESTION:
        park_call(host, index, call, "question")
    else:
        content, is_error = await sleep_call(host, index, call)
        record_result(host, index, call, content, is_error)


def park_call(host: StepHost, index: int, call: ToolCallRecord, kind: str) -> None:
    keys = host.turn.tool(call["id"]).request
    request: PendingRequest = {
        "requestId": keys.id,
        "kind": kind,
        "callId": call["id"],
        "tool": call["name"],
        "arguments": call["arguments"],
        "step": index,
    }
    if kind == "question":
        arguments = call["arguments"] or {}
        question, options = arguments.get("question", ""), arguments.get("options")
        request["question"] = question if isinstance(question, str) else str(question)
        request["options"] = [str(o) for o in options] if isinstance(options, list) else None
    host.snap.pending.append(request)
    host.emit("input.requested", requested_event(request), keys.requested, index)


async def run_tool(
    host: StepHost,
    index: int,
    call: ToolCallRecord,
    tool: Tool,
    checked: JSONObject | None = None,
    attempt: int = 1,
) -> None:
    """Run one tool call as a durable action; its state changes are saved with its result.
    ``checked``: its arguments as :meth:`Tool.validate` returned them just now. ``attempt``:
    a run the user asked for after an interrupted one (see ``_effects``)."""
    ctx = ToolContext(
        session_id=host.session_id,
        call_id=call["id"],
        idempotency_key=host.turn.tool(call["id"]).idempotency_key(host.session_id),
        turn_id=host.turn_id or "",
        principal=host.principal,
        initiator=host.initiator,
    )
    execute = tool_function(host, tool, call, ctx, checked)
    name = action_name(call["id"], attempt)
    outcome: ToolOutcome = await host.action(name, execute, tracked=is_tracked(tool))
    if outcome.get("unknown"):
        outcome_request(host, index, call, attempt)
        return
    if (state := outcome.get("state")) is not None:
        host.snap.state = state
    record_result(
        host,
        index,
        call,
        outcome["content"],
        outcome["isError"],
        progress=outcome.get("progress") or None,
        duration_ms=outcome.get("durationMs"),
        extra=outcome.get("extra"),
    )


def record_result(
    host: StepHost,
    index: int,
    call: ToolCallRecord,
    content: str,
    is_error: bool,
    status: str | None = None,
    progress: list[str] | None = None,
    duration_ms: int | None = None,
    extra: ToolExtra | None = None,
) -> None:
    """Append the tool message the model will see and emit ``action.result``. ``extra``:
    what an MCP call returned besides text (kept in history: images as bytes)."""
    message: Message = {
        "role": "tool",
        "tool_call_id": call["id"],
        "name": call["name"],
        "content": content,
        "is_error": is_error,
    }
    if extra and "parts" in extra:  # kept in history beside the text (images as bytes)
        message["parts"] = extra["parts"]
    if extra and "structured" in extra:
        message["structured"] = extra["structured"]
    keys = host.turn.tool(call["id"])
    host.append_history(message, keys.message)
    data: EventData = {
        "callId": call["id"],
        "name": call["name"],
        "status": status or ("failed" if is_error else "completed"),
        "isError": is_error,
        "output": content,
    }
    if progress:
        data["progress"] = progress
    if duration_ms is not None:
        data["durationMs"] = duration_ms
    if extra and "server" in extra:
        data["server"], data["tool"] = extra["server"], extra["tool"]
    host.emit("action.result", data, keys.result, index)


async def admit_resolved(host: StepHost, index: int) -> str | None:
    """Act on answered requests: run approved calls, reject denied ones, answer questions.

    Returns an error when the turn must fail (a denied request to go past a limit).
    """
    snap = host.snap
    ready = [r for r in snap.pending if "resolution" in r]
    snap.pending = [r for r in snap.pending if "resolution" not in r]
    for request in ready:
        resolution = request["resolution"]
        if request["kind"] == "limit":
            if not resolution.get("approved"):
                return f"stopped at the {request['limit']} limit: continuing was not approved"
            grant_more(host, request["limit"])
            continue
        call: ToolCallRecord = {
            "id": request["callId"],
            "name": request["tool"],
            "arguments": request["arguments"],
        }
        if request["kind"] == "question":
            record_result(host, index, call, str(resolution.get("answer", "")), False)
        elif request["kind"] == "cancelled":
            record_result(host, index, call, CANCELLED_CALL, True, "rejected")
        elif request["kind"] == OUTCOME:
            await settle_outcome(host, index, call, request)
        elif resolution.get("approved"):
            await run_again(host, index, call)
        else:
            record_result(host, index, call, "The user denied this call.", True, "rejected")
    return None


async def run_again(host: StepHost, index: int, call: ToolCallRecord, attempt: int = 1) -> None:
    """Run an answered call (approved, or asked to run again) with the tool as it is now."""
    tool = host.find_tool(call["name"])
    if tool is None:
        record_result(host, index, call, f"Tool {call['name']!r} no longer exists", True)
    else:
        await run_tool(host, index, call, tool, attempt=attempt)


async def settle_outcome(
    host: StepHost, index: int, call: ToolCallRecord, request: PendingRequest
) -> None:
    """Act on the answer to an interrupted call's ``outcome`` request (see ``_effects``)."""
    resolution = request["resolution"]
    answer = resolution.get("outcome")
    if answer == RESULT:
        record_result(host, index, call, str(resolution.get("result", "")), False)
    elif answer == RERUN:
        await run_again(host, index, call, request.get("attempt", 1) + 1)
    else:
        record_result(host, index, call, TREATED_AS_FAILED, True)
