"""One step: settle parked work, admit approved calls, check limits, compact if needed, one
model call (or ``model_calls_per_step``), then the tool calls it asked for (SPEC §6).

Each model call and each tool call is its own durable action, so a re-run of an interrupted
step repeats only the action that was in flight (D2). The parts live beside this loop: the
model call (:mod:`._model_call`), its streamed text (:mod:`._deltas`), the tool calls
(:mod:`._tool_calls`) and the session's limits (:mod:`._limits`).
"""

from __future__ import annotations

from eve_cli._events import ActionRequest, EventData
from eve_cli._keys import ModelCall
from eve_cli.harness._compaction import compact, needs_compaction
from eve_cli.harness._host import StepHost
from eve_cli.harness._limits import check_limits
from eve_cli.harness._model_call import call_model, system_prompt, tool_specs
from eve_cli.harness._outcome import ModelAnswer, StepResult
from eve_cli.harness._result import check_result, output_schema
from eve_cli.harness._tool_calls import (
    CANCELLED_CALL,
    admit_resolved,
    dispatch_call,
    record_result,
)

__all__ = ["StepResult", "count_usage", "run_step"]

# A call's recorded usage -> the step event's names (the parts only when not zero).
_USAGE_NAMES = (
    ("input", "inputTokens"),
    ("output", "outputTokens"),
    ("cacheRead", "cacheReadTokens"),
    ("cacheWrite", "cacheWriteTokens"),
    ("reasoning", "reasoningTokens"),
)


async def run_step(host: StepHost, index: int) -> StepResult:
    """Run step ``index`` of the current turn."""
    host.snap.steps += 1
    keys = host.turn.step(index)
    host.emit("step.started", {}, keys.start, index)
    usage = {"inputTokens": 0, "outputTokens": 0}
    cost: list[float] = []  # the step's calls' costs, when their model has a price
    # (no coroutine for a step with no requests open: nearly all of them)
    settled = await admit_resolved(host, index) if host.snap.pending else None
    if settled is not None:
        host.emit("step.failed", {"error": settled}, keys.failed, index)
        return StepResult("failed", settled)
    result = StepResult("continue")
    for m in range(host.agent.config.model_calls_per_step):
        if (limited := check_limits(host, index)) is not None:
            result = limited
            break
        result = await model_round(host, index, keys.call(m), usage, cost)
        if result.outcome != "continue":
            break
    if result.outcome == "failed":
        host.emit("step.failed", {"error": result.error}, keys.failed, index)
    else:
        done: EventData = {"usage": usage}
        if cost:
            done["cost"] = round(sum(cost), 9)
        host.emit("step.completed", done, keys.done, index)
    return result


def count_usage(
    host: StepHost, call: dict[str, int], usage: dict[str, int], cost: list[float]
) -> None:
    """Add one model call's recorded usage to its step's and the session's totals, and its
    cost when the model has a price."""
    for recorded, name in _USAGE_NAMES:
        if amount := call.get(recorded, 0):
            usage[name] = usage.get(name, 0) + amount
    host.snap.tokens += call.get("input", 0) + call.get("output", 0)
    if (price := host.price()) is not None:
        spent = price.cost(call)
        cost.append(spent)
        host.snap.cost += spent


def show_reasoning(host: StepHost, answer: ModelAnswer, keys: ModelCall, index: int) -> None:
    """The ``reasoning.completed`` event of an answer that showed some of its reasoning."""
    if answer.reasoning or answer.redacted:
        shown: EventData = {"text": answer.reasoning}
        if answer.redacted:
            shown["redacted"] = True
        host.emit("reasoning.completed", shown, keys.reasoning, index)


def _final(host: StepHost, index: int, keys: ModelCall, text: str) -> StepResult:
    """An answer without tool calls: the turn's end, once its structured result (if the agent
    has an output schema) is valid."""
    if output_schema(host)[0] is not None:
        return check_result(host, index, keys, text)
    return StepResult("done")


def show_provider_calls(host: StepHost, answer: ModelAnswer, keys: ModelCall, index: int) -> None:
    """The events of the tools the provider ran in its answer (web search, ...): requested and
    settled as provider-executed, with no local duration; they are not run here, and a replay
    emits them from the history item, as recorded."""
    if not answer.provider_calls:
        return
    requested: list[ActionRequest] = [
        {"callId": c["id"], "name": c["name"], "arguments": c.get("arguments"),
         "providerExecuted": True}
        for c in answer.provider_calls
    ]  # fmt: skip
    host.emit("actions.requested", {"actions": requested}, keys.provider_requested, index)
    for n, call in enumerate(answer.provider_calls):
        failed = bool(call.get("isError"))
        data: EventData = {
            "callId": call["id"], "name": call["name"],
            "status": "failed" if failed else "completed", "isError": failed,
            "output": call.get("output") or "", "providerExecuted": True,
        }  # fmt: skip
        host.emit("action.result", data, keys.provider_result(n), index)


async def model_round(
    host: StepHost, index: int, keys: ModelCall, usage: dict[str, int], cost: list[float]
) -> StepResult:
    """Compaction check, one model call (``keys``: its keys), then its tool calls."""
    system = system_prompt(host)
    specs = tool_specs(host)
    await host.load_history()  # off the loop where reads wait: the checks below read none
    estimate = needs_compaction(host, system, specs)
    if estimate is not None and await compact(host, keys.compaction, index, estimate=estimate):
        await host.load_history()  # the window moved: read for the model call, off the loop
    if await host.cancel_requested():  # an action boundary: no model call after a cancel
        return StepResult("cancelled")
    answer = await call_model(host, index, keys, system, specs)
    if answer.error is not None:
        return StepResult("failed", answer.error)
    if answer.cancelled:
        if answer.partial:  # what was shown live stays in the transcript
            data: EventData = {"role": "assistant", "text": answer.partial, "cancelled": True}
            host.emit("message.completed", data, keys.completed, index)
        return StepResult("cancelled")
    count_usage(host, answer.usage, usage, cost)
    show_reasoning(host, answer, keys, index)
    show_provider_calls(host, answer, keys, index)
    calls = answer.tool_calls
    # The reply is an item of the history stream (stored by the call's step); the event refers
    # to it (``_h``) and readers see its text. An empty text is stored as it is: a reader then
    # has nothing to look up (most steps of a tool loop say nothing).
    said: EventData = (
        {"role": "assistant", "_h": answer.index}
        if answer.text
        else {"role": "assistant", "text": ""}
    )
    host.emit("message.completed", said, keys.completed, index, text=answer.text)
    if not calls:
        return _final(host, index, keys, answer.text)
    host.emit(
        "actions.requested",
        {
            "actions": [
                {"callId": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in calls
            ]
        },
        keys.requested,
        index,
    )
    cancelled = False
    for call in calls:
        # Each call is an action boundary: once a cancel was delivered no call starts; those
        # left get a result, so the history stays valid for the next turn.
        cancelled = cancelled or await host.cancel_requested()
        if cancelled:
            record_result(host, index, call, CANCELLED_CALL, True, "rejected")
        else:
            await dispatch_call(host, index, call)
    if cancelled:
        return StepResult("cancelled")
    return StepResult("park" if host.snap.pending else "continue")
