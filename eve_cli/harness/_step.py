"""One step: settle parked work, admit approved calls, check limits, compact if needed, one
model call (or ``model_calls_per_step``), then the tool calls it asked for (SPEC §6).

Each model call and each tool call is its own durable action, so a re-run of an interrupted
step repeats only the action that was in flight (D2).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from eve_cli._agent_api import ToolContext, bind_state, unbind_state
from eve_cli._session import PendingRequest
from eve_cli._tool_threads import QUICK_WAIT
from eve_cli._tools import ASK_QUESTION, InvalidArguments, Tool
from eve_cli.harness._compaction import compact, needs_compaction
from eve_cli.harness._host import Reply, StepHost
from eve_cli.models import ModelError, ModelRequest, ToolSpec
from world import STORAGE_ERRORS

Outcome = Literal["continue", "done", "park", "failed", "cancelled"]
DELTA_MAX = 2000  # characters of one message.appended event at most
CANCELLED_CALL = "The turn was cancelled."  # the result of a call that never ran
T = TypeVar("T")


@dataclass
class StepResult:
    outcome: Outcome
    error: str | None = None


def tool_specs(host: StepHost) -> list[ToolSpec]:
    specs = [t.spec for t in host.agent.tools.values()]
    for name, sub in host.agent.subagents.items():
        specs.append(
            ToolSpec(
                name,
                f"Delegate a task to the {name} sub-agent: {sub.description}",
                {
                    "type": "object",
                    "properties": {"task": {"type": "string"}},
                    "required": ["task"],
                    "additionalProperties": False,
                },
            )
        )
    return specs


def system_prompt(host: StepHost) -> str:
    config = host.agent.config
    text = host.agent.instructions
    if config.output_schema:
        import json

        text += "\n\nYour final answer must be JSON matching this schema:\n" + json.dumps(
            config.output_schema
        )
    return text


async def run_step(host: StepHost, index: int) -> StepResult:
    """Run step ``index`` of the current turn."""
    host.snap.steps += 1
    prefix = f"{host.turn_id}:{index}"
    host.emit("step.started", {}, f"{prefix}:start", index)
    usage = {"inputTokens": 0, "outputTokens": 0}
    settled = await admit_resolved(host, index)
    if settled is not None:
        host.emit("step.failed", {"error": settled}, f"{prefix}:fail", index)
        return StepResult("failed", settled)
    result = StepResult("continue")
    for m in range(host.agent.config.model_calls_per_step):
        if (limited := check_limits(host, index)) is not None:
            result = limited
            break
        result = await model_round(host, index, m, usage)
        if result.outcome != "continue":
            break
    if result.outcome == "failed":
        host.emit("step.failed", {"error": result.error}, f"{prefix}:fail", index)
    else:
        host.emit("step.completed", {"usage": usage}, f"{prefix}:done", index)
    return result


async def model_round(host: StepHost, index: int, m: int, usage: dict[str, int]) -> StepResult:
    """Compaction check, one model call, then its tool calls."""
    prefix = f"{host.turn_id}:{index}:{m}"
    system = system_prompt(host)
    specs = tool_specs(host)
    estimate = needs_compaction(host, system, specs)
    if estimate is not None:
        await compact(host, prefix, index, estimate=estimate)
    if await host.cancel_requested():  # an action boundary: no model call after a cancel
        return StepResult("cancelled")
    response = await call_model(host, index, m, system, specs)
    if "error" in response:
        return StepResult("failed", response["error"])
    if response.get("cancelled"):
        if response.get("partial"):  # what was shown live stays in the transcript
            data = {"role": "assistant", "text": response["partial"], "cancelled": True}
            host.emit("message.completed", data, prefix, index)
        return StepResult("cancelled")
    usage["inputTokens"] += response["usage"]["input"]
    usage["outputTokens"] += response["usage"]["output"]
    host.snap.tokens += response["usage"]["input"] + response["usage"]["output"]
    calls = response["tool_calls"]
    # The reply is an item of the history stream (stored by the call's step); the event refers
    # to it (``_h``) and readers see its text. An empty text is stored as it is: a reader then
    # has nothing to look up (most steps of a tool loop say nothing).
    said = {"_h": response["h"]} if response["text"] else {"text": ""}
    host.emit(
        "message.completed", {"role": "assistant", **said}, prefix, index, text=response["text"]
    )
    if not calls:
        return StepResult("done")
    host.emit(
        "actions.requested",
        {
            "actions": [
                {"callId": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in calls
            ]
        },
        f"{prefix}:req",
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


async def call_model(
    host: StepHost, index: int, m: int, system: str, specs: list[ToolSpec]
) -> dict[str, Any]:
    snap = host.snap
    n = snap.model_calls
    model = host.model()
    request = ModelRequest(
        system=system,
        messages=[],
        tools=specs,
        call_index=n,
        session_id=host.session_id,
    )
    deltas = DeltaBuffer(host, f"{host.turn_id}:{index}:{m}:d", index)
    reply_key = f"{host.turn_id}:{index}:{m}:a"

    async def generate() -> dict[str, Any]:
        messages, (_, tokens) = host.read_history(), host.history_tokens()
        full = ModelRequest(**{**request.__dict__, "messages": messages, "messages_tokens": tokens})
        try:
            try:
                response = await unless_cancelled(host, model.generate(full, deltas.add))
            finally:
                deltas.flush()
        except ModelError as exc:
            return {"error": str(exc)}
        except STORAGE_ERRORS:
            raise  # storing the deltas failed: the drive stops, the model is not to blame
        except Exception as exc:
            return {"error": f"model {model.name}: {type(exc).__name__}: {exc}"}
        if response is None:  # cancelled: the stream is closed, the turn ends
            return {"cancelled": True, "partial": "".join(deltas.sent)}
        bad = {c.id: {"error": c.argument_error, "raw": c.raw_arguments}
               for c in response.tool_calls
               if c.argument_error is not None or c.raw_arguments is not None}  # fmt: skip
        reply = Reply(
            text=response.text,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
            ],
            usage={"input": response.usage.input_tokens, "output": response.usage.output_tokens},
            call_errors=bad,
        )
        return host.keep_reply(reply, deltas)  # journaled with the step (its one fsync)

    # Nobody sees a model's request: what came before it is written at the loop's next turn
    # or before the next tool (a step of instant tools writes its items once, not twice).
    result: dict[str, Any] = await host.action(f"model:{n}", generate, ordered=False)
    snap.model_calls += 1
    if "error" in result or result.get("cancelled"):
        return result
    # In history from workflow code after the step, which a replay repeats (stored once).
    stored = host.store_reply(result, reply_key, deltas)
    if stored is None:
        return {"error": f"the reply of model call {n} is missing from the event stream"}
    message = host.adopt_history(stored.index)
    calls = [{**c, **stored.call_errors.get(c.get("id"), {})}
             for c in message.get("tool_calls") or []]  # fmt: skip
    return {
        "h": stored.index,
        "usage": result["usage"],
        "text": message.get("content") or "",
        "tool_calls": calls,
    }


async def unless_cancelled(host: StepHost, call: Awaitable[T]) -> T | None:
    """``call``'s result, or None when a cancel is asked of this process first: ``call`` is
    then cancelled at once (a streaming HTTP response is closed, the server sees it).

    ``call`` runs in the caller's task, not a task of its own: racing two tasks would yield to
    the loop even for a model that answers at once, and a yield lets a world make its pending
    records durable on their own instead of with the model's record (one fsync more a step).
    """
    task = asyncio.current_task()
    assert task is not None
    in_call, asked = True, False

    def stop(signal: asyncio.Future[None]) -> None:
        nonlocal asked
        # Runs from the loop, so only while this task waits: inside ``call``, or already past
        # it (then there is nothing to stop).
        if in_call and not signal.cancelled():
            asked = True
            task.cancel()

    signal = asyncio.ensure_future(host.cancel_signalled())
    signal.add_done_callback(stop)
    try:
        result = await call
    except asyncio.CancelledError:
        if not asked or task.uncancel() > 0:
            raise  # a cancel of the caller's own: not ours to swallow
        return None
    finally:
        in_call = False
        signal.cancel()
    if asked:  # the call finished despite being cancelled (it caught the CancelledError)
        task.uncancel()
    return result


class DeltaBuffer:
    """Coalesces streamed text into ``message.appended`` events: the first deltas at the
    loop's next turn (whatever arrived together: a model that yields its whole text at once
    stores one event), then whatever arrived within 0.2 s of the text held first, as one
    event (at most :data:`DELTA_MAX` characters). A reader sees text at most 0.2 s after the
    model sent it, and a fast stream stores a few events a second, not one per token.

    Keys carry the text offset (``<call>@<start>+<length>``): when an interrupted call runs
    again, the part of its text already streamed is not appended a second time.
    """

    def __init__(self, host: StepHost, key: str, step: int) -> None:
        self.host, self.key, self.step = host, key, step
        self.held: list[str] = []
        self.size = 0  # characters held
        self.offset = 0  # characters flushed so far
        self.timer: asyncio.Handle | None = None
        # Characters an earlier run of this call already stored.
        self.streamed = max((start + length for start, length, _ in self.spans()), default=0)
        self.sent: list[str] = []  # what this run appended
        self.indexes: list[int] = []  # where (event indexes)

    async def add(self, text: str) -> None:
        self.held.append(text)
        self.size += len(text)
        if self.size >= DELTA_MAX:
            self.flush()
        elif self.timer is None:
            loop = asyncio.get_running_loop()
            # The first text at once (the loop's next turn), later text within 0.2 s.
            first = self.offset == 0
            self.timer = loop.call_soon(self.flush) if first else loop.call_later(0.2, self.flush)

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        text, self.held, self.size = "".join(self.held), [], 0
        if not text:
            return  # nothing arrived since the last flush
        start, self.offset = self.offset, self.offset + len(text)
        if self.offset <= self.streamed:
            return  # stored by an earlier run of this call
        if start < self.streamed:
            text, start = text[self.streamed - start :], self.streamed
        key = f"{self.key}@{start}+{len(text)}"
        self.host.emit("message.appended", {"delta": text}, key, self.step)
        self.sent.append(text)
        index = self.host.emitted_index(key)
        if index is not None:
            self.indexes.append(index)

    def spans(self) -> list[tuple[int, int, str]]:
        """``(start, length, key)`` of each delta event of this call stored so far."""
        spans = []
        for key in self.host.emitted_keys(f"{self.key}@"):
            start, _, length = key[len(self.key) + 1 :].partition("+")
            if start.isdigit() and length.isdigit():
                spans.append((int(start), int(length), key))
        return spans

    def holds(self, text: str) -> bool:
        """True when this run's events hold ``text`` whole (none came from an earlier run,
        whose text a non-deterministic model may not repeat)."""
        return (
            self.streamed == 0
            and len(self.indexes) == len(self.sent)
            and "".join(self.sent) == text
        )

    def text_events(self) -> tuple[str, list[int]] | None:
        """The text this call's delta events hold and their indexes: what this run appended
        (when it made the call), else what is stored (a replay)."""
        if self.sent and self.streamed == 0:
            return "".join(self.sent), list(self.indexes)
        return self.stored_text()

    def stored_text(self) -> tuple[str, list[int]] | None:
        """The text of this call's stored delta events, in order, and their indexes; None
        when they are not one unbroken run from the start."""
        text, indexes = "", []
        for start, length, key in sorted(self.spans()):
            event = self.host.emitted_event(key) or {}
            delta, index = event.get("delta"), self.host.emitted_index(key)
            if start != len(text) or not isinstance(delta, str) or len(delta) != length:
                return None
            if index is None:
                return None
            text += delta
            indexes.append(index)
        return text, indexes


def request_id(host: StepHost, call_id: str) -> str:
    return f"{host.turn_id}:{call_id}"


async def dispatch_call(host: StepHost, index: int, call: dict[str, Any]) -> None:
    """Run, reject or park one tool call according to its validity and approval policy."""
    name = call["name"]
    tool = host.agent.tools.get(name)
    if call.get("arguments") is None:
        why = call.get("error") or "arguments could not be parsed"
        record_result(host, index, call, f"Invalid arguments for tool {name!r}: {why}", True)
        return
    if name in host.agent.subagents:
        task = call["arguments"].get("task")
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
        checked = tool.validate(call["arguments"])
    except InvalidArguments as exc:
        record_result(host, index, call, f"Invalid arguments for tool {name!r}: {exc}", True)
        return
    if name == ASK_QUESTION:
        park_call(host, index, call, "question")
        return
    try:
        decision = tool.approval.decide(
            call["arguments"], approved_before=name in host.snap.approved_tools
        )
    except Exception as exc:
        record_result(host, index, call, f"Approval policy failed: {exc}", True)
        return
    if decision == "approved":
        await run_tool(host, index, call, tool, checked)
    elif decision == "denied":
        record_result(host, index, call, "The approval policy denied this call.", True, "rejected")
    else:
        park_call(host, index, call, "approval")


def park_call(host: StepHost, index: int, call: dict[str, Any], kind: str) -> None:
    request: PendingRequest = {
        "requestId": request_id(host, call["id"]),
        "kind": kind,
        "callId": call["id"],
        "tool": call["name"],
        "arguments": call["arguments"],
        "step": index,
    }
    if kind == "question":
        request["question"] = call["arguments"].get("question", "")
        request["options"] = call["arguments"].get("options")
    host.snap.pending.append(request)
    host.emit(
        "input.requested",
        {k: v for k, v in request.items() if k != "step"},
        f"{host.turn_id}:{call['id']}:ireq",
        index,
    )


async def run_tool(
    host: StepHost,
    index: int,
    call: dict[str, Any],
    tool: Tool,
    checked: dict[str, Any] | None = None,
) -> None:
    """Run one tool call as a durable action; its state changes are saved with its result.
    ``checked``: its arguments as :meth:`Tool.validate` returned them just now."""
    snap = host.snap
    key = f"{host.session_id}:{host.turn_id}:{call['id']}"
    ctx = ToolContext(
        session_id=host.session_id,
        call_id=call["id"],
        idempotency_key=key,
        turn_id=host.turn_id or "",
    )
    before = dict(snap.state)

    async def execute() -> dict[str, Any]:
        values = dict(before)
        token = bind_state(values)
        began = time.monotonic()
        try:
            result = await tool.execute(
                call["arguments"], ctx, wait=QUICK_WAIT if host.solo() else 0.0, checked=checked
            )
        finally:
            unbind_state(token)
        changed = values if values != before else None
        return {
            "content": result.content,
            "isError": result.is_error,
            "state": changed,
            "progress": ctx.progress_messages,
            # Journaled with the result, so a replay reports the duration of the real run.
            "durationMs": round((time.monotonic() - began) * 1000),
        }

    outcome: dict[str, Any] = await host.action(f"tool:{call['id']}", execute)
    if outcome.get("state") is not None:
        snap.state = outcome["state"]
    record_result(
        host,
        index,
        call,
        outcome["content"],
        outcome["isError"],
        progress=outcome.get("progress") or None,
        duration_ms=outcome.get("durationMs"),
    )


def record_result(
    host: StepHost,
    index: int,
    call: dict[str, Any],
    content: str,
    is_error: bool,
    status: str | None = None,
    progress: list[str] | None = None,
    duration_ms: int | None = None,
) -> None:
    """Append the tool message the model will see and emit ``action.result``."""
    host.append_history(
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "name": call["name"],
            "content": content,
            "is_error": is_error,
        },
        f"{host.turn_id}:{call['id']}:r",
    )
    data: dict[str, Any] = {
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
    host.emit("action.result", data, f"{host.turn_id}:{call['id']}:res", index)


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
            # Going on grants a fresh budget of the same size, counted from now.
            if request["limit"] == "token":
                snap.token_allowance = snap.tokens
            else:
                snap.time_allowance = host.now() - snap.created_at
            continue
        call = {"id": request["callId"], "name": request["tool"], "arguments": request["arguments"]}
        if request["kind"] == "question":
            record_result(host, index, call, str(resolution.get("answer", "")), False)
        elif request["kind"] == "cancelled":
            record_result(host, index, call, CANCELLED_CALL, True, "rejected")
        elif resolution.get("approved"):
            tool = host.agent.tools.get(call["name"])
            if tool is None:
                record_result(host, index, call, f"Tool {call['name']!r} no longer exists", True)
            else:
                await run_tool(host, index, call, tool)
        else:
            record_result(host, index, call, "The user denied this call.", True, "rejected")
    return None


def check_limits(host: StepHost, index: int) -> StepResult | None:
    """Park (conversation) or fail (task) when the session's limits are exhausted."""
    snap = host.snap
    limits = host.agent.config.limits
    which = None
    if limits.tokens_per_session and snap.tokens >= (
        limits.tokens_per_session + snap.token_allowance
    ):
        which = "token"
    elif limits.session_timeout and host.now() - snap.created_at >= (
        limits.session_timeout + snap.time_allowance
    ):
        which = "time"
    if which is None:
        return None
    what = "tokens per session" if which == "token" else "session timeout"
    if snap.mode == "task":
        return StepResult("failed", f"limit reached: {what} (a task cannot ask to go on)")
    request: PendingRequest = {
        "requestId": f"{host.turn_id}:limit:{index}",
        "kind": "limit",
        "limit": which,
        "message": f"The session reached its limit ({what}). Continue?",
        "step": index,
    }
    snap.pending.append(request)
    data = {k: v for k, v in request.items() if k != "step"}
    data["kind"] = "approval"
    data["reason"] = "limit"
    host.emit("input.requested", data, f"{host.turn_id}:limit:{index}:ireq", index)
    return StepResult("park")
