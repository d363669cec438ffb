"""Compaction: before a model call whose estimated input would not fit, replace older history
by a summary and keep the recent tail. A failed summary keeps the old history (reported).

The summary is an item of the history stream (role ``summary``), stored by the summarising
step itself, whose journaled result is only its index: neither the journal nor the snapshot
carries the summary text, so their size does not grow with the session's age.
"""

from __future__ import annotations

from typing import TypedDict

from eve_cli._keys import Compaction
from eve_cli._session import SUMMARY_ROLE, summary_message
from eve_cli.harness._host import StepHost
from eve_cli.models import (
    Message,
    ModelError,
    ModelRequest,
    ToolSpec,
    estimate_text,
    estimate_with,
    message_tokens,
)
from world import STORAGE_ERRORS


class _Summary(TypedDict, total=False):
    """What a compaction's action journals: the summary's history index (``h``), its token
    estimate and how many messages it replaced (``cut``: a replay keeps that cut, whatever
    the code would choose now), or why there is none (``error``)."""

    h: int
    tokens: int
    cut: int
    error: str


SUMMARY_SYSTEM = (
    "Summarise the conversation so far for your own later use: facts, decisions, open tasks, "
    "names and numbers. Be concise."
)


def threshold(host: StepHost) -> int:
    window = host.model().context_window
    return int(window * host.agent.config.compaction.threshold_percent)


def needs_compaction(host: StepHost, system: str, tools: list[ToolSpec]) -> int | None:
    """The estimate when it exceeds the threshold (with the reserved overhead), else None."""
    count, tokens = host.history_tokens()  # kept by the host: a step costs no history walk
    estimate = estimate_with(system, tokens, tools)
    reserve = host.agent.config.compaction.reserve(host.model().context_window)
    if count and estimate + reserve > threshold(host):
        return estimate
    return None


def _tail_budget(host: StepHost, estimate: int) -> int:
    """Tokens of history a compaction keeps: half of what the system prompt, the tools and the
    reserve leave the history under the threshold (``estimate`` less the history is theirs).
    Half the threshold, whatever they take, held nearly all the history when they took half
    the window (a local model's): each compaction cut a message or two and every request went
    on over the model's window."""
    fixed = estimate - host.history_tokens()[1]
    reserve = host.agent.config.compaction.reserve(host.model().context_window)
    return max((threshold(host) - reserve - fixed) // 2, 1)


def _tail_start(window: list[Message], budget: int) -> int:
    """Where the kept tail begins: the earliest message that starts an exchange (a user
    message, or the model's message of a step, before its tool results) whose tail fits
    ``budget``, else the latest one. A tail never starts at a tool result; one turn longer
    than the window is cut between its steps (its recent steps kept). 0: nowhere to cut;
    ``len(window)`` when no message starts an exchange (all of it is summarised). A message
    counts as the estimate that asked for the compaction counts it, overhead included:
    without it a history of many short messages fits the budget whole, is never cut, and
    every later step walks it again."""
    chosen, size = len(window), 0
    for i in range(len(window) - 1, -1, -1):
        message = window[i]
        size += message_tokens(message)
        if message.get("role") not in ("user", "assistant"):
            continue
        if size > budget and chosen < len(window):
            break
        chosen = i
    return chosen


def _plain(message: Message) -> Message:
    """A message without the provider's own blocks (reasoning, server tools): a summary needs
    the conversation, and a provider may refuse reasoning sent back outside its tool loop."""
    return (
        {k: v for k, v in message.items() if k != "reasoning"}
        if "reasoning" in message
        else message
    )


async def compact(
    host: StepHost,
    keys: Compaction,
    step: int | None,
    *,
    estimate: int | None,
    force: bool = False,
) -> bool:
    """Summarise older history under ``keys``; returns True when history was replaced.
    ``estimate``: the request's that asked for it (None, or ``force``: all of it is)."""
    snap = host.snap
    await host.load_history()
    current = host.summary_text()
    window = host.read_history()[1 if current else 0 :]
    if force or estimate is None:
        cut = len(window)
    else:
        cut = _tail_start(window, _tail_budget(host, estimate))
    if cut <= 0 and not force:
        return False
    host.emit(
        "compaction.requested",
        {"estimatedTokens": estimate, "threshold": threshold(host), "forced": force},
        keys.requested,
        step,
    )
    older = window[:cut]
    prior = [summary_message(current)] if current else []
    model = host.model()
    call_index = snap.model_calls

    async def summarise() -> _Summary:
        request = ModelRequest(
            system=SUMMARY_SYSTEM,
            messages=prior + [_plain(m) for m in older],
            call_index=call_index,
            purpose="summary",
            session_id=host.session_id,
        )
        try:
            response = await model.generate(request)
        except ModelError as exc:
            return {"error": str(exc)}
        except STORAGE_ERRORS:
            raise
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        # Stored here, not by the workflow after the step: the journal keeps only the index.
        index = host.store_history({"role": SUMMARY_ROLE, "content": response.text}, keys.summary)
        return {"h": index, "tokens": estimate_text(response.text), "cut": cut}

    # A request no one observes, as a step's model call: what came before it, and the
    # summary's item and record, go with the next commit (`ordered=False`).
    result: _Summary = await host.action(keys.action, summarise, ordered=False)
    if "error" in result:
        host.emit(
            "compaction.completed",
            {"status": "failed", "error": result["error"], "keptHistory": True},
            keys.completed,
            step,
        )
        return False
    index, tokens = result["h"], result["tokens"]
    cut = result.get("cut", cut)  # (a compaction journaled before cuts were: as chosen now)
    snap.history_start = host.history_index(cut)
    host.adopt_history(index)
    snap.summary_at = index
    snap.compactions += 1
    host.emit(
        "compaction.completed",
        {
            "status": "completed",
            "removedMessages": cut,
            "keptMessages": len(window) - cut,
            "summaryTokens": tokens,
        },
        keys.completed,
        step,
    )
    return True
