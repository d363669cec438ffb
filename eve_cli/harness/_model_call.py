"""One model call of a step: the request (system prompt, tool specs, the history), the call
as a durable action stopped by a cancel while in flight, and its reply kept by the host."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from eve_cli._keys import Key, ModelCall
from eve_cli._text import repair, warn
from eve_cli.harness._deltas import DeltaBuffer
from eve_cli.harness._host import KeptReply, Reply, StepHost
from eve_cli.harness._outcome import AnsweredCall, ArgumentError, ModelAnswer
from eve_cli.harness._result import output_schema
from eve_cli.models import ModelError, ModelRequest, ModelResponse, ToolSpec
from world import STORAGE_ERRORS

if TYPE_CHECKING:
    from eve_cli._loader import AgentDefinition

T = TypeVar("T")


# The last agent definition whose specs were made, with them: a definition is loaded once a
# turn and asked at every step (the same list, whose token estimate is then kept too).
_SPECS: list[tuple[AgentDefinition, list[ToolSpec]]] = []


def tool_specs(host: StepHost) -> list[ToolSpec]:
    """What the model is told of the agent's tools and sub-agents (not to be changed)."""
    agent = host.agent
    if _SPECS and _SPECS[0][0] is agent:
        return _SPECS[0][1]
    specs = _tool_specs(agent)
    _SPECS[:] = [(agent, specs)]
    return specs


def _tool_specs(agent: AgentDefinition) -> list[ToolSpec]:
    specs = [t.spec for t in agent.tools.values()]
    for name, sub in agent.subagents.items():
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
    agent = host.agent
    text = agent.instructions
    if schema := output_schema(host)[0]:
        import json

        text += "\n\nYour final answer must be JSON matching this schema:\n" + json.dumps(schema)
    return text


async def call_model(
    host: StepHost, index: int, keys: ModelCall, system: str, specs: list[ToolSpec]
) -> ModelAnswer:
    """Model call ``keys.m`` of step ``index``, a durable action, and its reply stored in
    history."""
    snap = host.snap
    n = snap.model_calls
    model = host.model()
    thoughts = DeltaBuffer(host, keys.reasoning_deltas, index, reasoning=True)
    # What streamed of the reasoning is stored before the answer.
    deltas = DeltaBuffer(host, keys.text_deltas, index, before=thoughts)

    async def ask() -> ModelResponse:
        messages, (_, tokens) = host.read_history(), host.history_tokens()
        # MCP servers' tools, read live (not replayed); none without servers (no coroutine)
        served, note = await host.turn_tools() if host.agent.mcp else ([], "")
        request = ModelRequest(
            system=system + note,
            messages=messages,
            tools=[*specs, *served] if served else specs,
            call_index=n,
            session_id=host.session_id,
            messages_tokens=tokens,
            output_schema=output_schema(host)[0],
            provider_tools=list(host.agent.config.provider_tools),
        )
        return await model.generate(request, deltas.add, thoughts.add)

    async def generate() -> KeptReply:
        try:
            try:
                response = await unless_cancelled(host, ask())
            finally:
                thoughts.flush()
                deltas.flush()
        except ModelError as exc:
            return {"error": str(exc)}
        except STORAGE_ERRORS:
            raise  # storing the deltas failed: the drive stops, the model is not to blame
        except Exception as exc:
            return {"error": f"model {model.name}: {type(exc).__name__}: {exc}"}
        if response is None:  # cancelled: the stream is closed, the turn ends
            return {"cancelled": True, "partial": "".join(deltas.sent)}
        response = valid_text(response, model.name)
        bad: dict[str, ArgumentError] = {
               c.id: {"error": c.argument_error, "raw": c.raw_arguments}
               for c in response.tool_calls
               if c.argument_error is not None or c.raw_arguments is not None}  # fmt: skip
        reply = Reply(
            text=response.text,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
            ],
            usage=response.usage.as_record(),
            call_errors=bad,
            reasoning=response.reasoning,
        )
        return host.keep_reply(reply, deltas)  # what the step's record holds

    if host.agent.mcp:  # the MCP servers' start-up: not the call's time
        await host.start_tools(keys.mcp, index)
    # Nobody observes a model's request: what came before it need not be stored before the
    # request is sent, only before anything observed follows (`ordered=False`).
    result: KeptReply = await host.action(f"model:{n}", generate, ordered=False)
    snap.model_calls += 1
    return _answer(host, result, keys.reply, deltas, n)


def valid_text(response: ModelResponse, model: str) -> ModelResponse:
    """``response`` with text that is not valid Unicode repaired (U+FFFD, one warning): a
    JSON ``"\\ud800"`` from a provider must not fail the step that stores it."""
    text, changed = repair(response.text)
    calls = []
    for call in response.tool_calls:
        fields = (call.id, call.name, call.arguments, call.raw_arguments, call.argument_error)
        fixed, n = repair(fields)
        changed += n
        calls.append(replace(call, **dict(zip(_CALL_FIELDS, fixed, strict=True))) if n else call)
    reasoning, n = repair(response.reasoning)  # a provider's blocks too (kept in history)
    changed += n
    if not changed:
        return response
    warn(f"model {model}")
    return replace(response, text=text, tool_calls=calls, reasoning=reasoning)


_CALL_FIELDS = ("id", "name", "arguments", "raw_arguments", "argument_error")


def _answer(
    host: StepHost, result: KeptReply, key: Key, deltas: DeltaBuffer, n: int
) -> ModelAnswer:
    """The answer of model call ``n`` from what its action journaled (``result``), its reply
    stored in history under ``key`` (from workflow code after the step, which a replay
    repeats: stored once)."""
    if "error" in result:
        return ModelAnswer(error=result["error"])
    if result.get("cancelled"):
        return ModelAnswer(cancelled=True, partial=result.get("partial") or "")
    stored = host.store_reply(result, key, deltas)
    if stored is None:
        return ModelAnswer(error=f"the reply of model call {n} is missing from the event stream")
    message = host.adopt_history(stored.index)
    calls: list[AnsweredCall] = []
    for c in message.get("tool_calls") or []:
        call: AnsweredCall = {"id": c["id"], "name": c["name"], "arguments": c["arguments"]}
        if (error := stored.call_errors.get(c["id"])) is not None:
            call["error"], call["raw"] = error["error"], error["raw"]
        calls.append(call)
    answer = ModelAnswer(stored.index, message.get("content") or "", calls, result["usage"])
    reasoning = message.get("reasoning")
    if isinstance(reasoning, dict):
        answer.reasoning = str(reasoning.get("text") or "")
        answer.redacted = bool(reasoning.get("redacted"))
        answer.provider_calls = list(reasoning.get("providerCalls") or ())
    return answer


async def unless_cancelled(host: StepHost, call: Awaitable[T]) -> T | None:
    """``call``'s result, or None when a cancel is asked of this process first: ``call`` is
    then cancelled at once (a streaming HTTP response is closed, the server sees it).

    ``call`` runs in the caller's task, not a task of its own (racing two tasks would yield to
    the loop even for a model that answers at once): what a cancel must find true is only that
    the call was stopped, and the step records whatever it answered.
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

    signal = host.cancel_signal()
    signal.add_done_callback(stop)
    try:
        result = await call
    except asyncio.CancelledError:
        if not asked or task.uncancel() > 0:
            raise  # a cancel of the caller's own: not ours to swallow
        return None
    finally:
        in_call = False
        signal.remove_done_callback(stop)  # so the cancel below schedules nothing
        signal.cancel()
    if asked:  # the call finished despite being cancelled (it caught the CancelledError)
        task.uncancel()
    return result
