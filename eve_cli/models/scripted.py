"""``scripted:PATH``: answers from a JSON script, for tests and reproducible demos.

The file is a list of entries ``{"text": str, "tool_calls": [{"name": str, "arguments": {}}]}``
(or ``{"responses": [...]}``). The session's N-th real model call (``request.call_index``,
counted from its durable history) answers entry N, so a re-run gets the same answer. Summaries
are produced deterministically and consume no entry. Test-only extras per entry: ``"delay"``
(seconds to wait after the first delta), ``"error"`` (the call fails with that message),
``"usage"`` (what the call reports instead of an estimate: ``input``, ``output``,
``cache_read``, ``cache_write``, ``reasoning`` tokens), ``"reasoning"`` (text the model
shows of its reasoning, as a compatible server's ``reasoning_content``, streamed before the
answer), ``"reasoning_delay"`` (seconds to wait after its first delta); at
the top level of the object form, ``"summary_error"`` makes every summary fail.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
from pathlib import Path
from typing import Any

from eve_cli._json import JSONObject
from eve_cli.models._base import (
    DeltaCallback,
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    Reasoning,
    ToolCall,
    Usage,
)
from eve_cli.models._offline import offline_summary, stream_words
from eve_cli.models._tokens import estimate_usage

DEFAULT_CONTEXT_WINDOW = 32_000
# Parsed scripts by path, with the (mtime, size) they were read at: a model object lives for
# one turn, a script for many.
_PARSED: dict[str, tuple[tuple[int, int], tuple[list[Any], str | None]]] = {}


class ScriptedModel(Model):
    """Entry N of the script answers the session's N-th model call."""

    def __init__(self, path: Path | str, *, context_window: int | None = None) -> None:
        self.path = Path(path)
        self._file = str(self.path)  # os.stat on a str: a Path costs more than the call
        self.name = f"scripted:{path}"
        self.context_window = context_window or DEFAULT_CONTEXT_WINDOW

    def _load(self) -> tuple[list[Any], str | None]:
        try:
            stat = os.stat(self._file)
            key = (stat.st_mtime_ns, stat.st_size)
            cached = _PARSED.get(self._file)
            if cached is not None and cached[0] == key:
                return cached[1]  # unchanged since the last call: parse once, not per turn
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelError("scripted", f"script {self.path} not found") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError("scripted", f"script {self.path} is not valid JSON: {exc}") from None
        summary_error = None
        if isinstance(data, dict):
            summary_error = data.get("summary_error")
            data = data.get("responses")
        if not isinstance(data, list):
            raise ModelError("scripted", f"script {self.path} must be a JSON list of responses")
        if len(_PARSED) >= 64:
            _PARSED.clear()
        _PARSED[self._file] = (key, (data, summary_error))
        return data, summary_error

    async def generate(
        self,
        request: ModelRequest,
        on_delta: DeltaCallback | None = None,
        on_reasoning: DeltaCallback | None = None,
    ) -> ModelResponse:
        entries, summary_error = self._load()
        if request.purpose == "summary":
            if summary_error:
                raise ModelError("scripted", str(summary_error))
            text = offline_summary(request.messages)
            return ModelResponse(text, usage=estimate_usage(request, text, []))
        n = request.call_index
        if n >= len(entries):
            raise ModelError(
                "scripted",
                f"script {self.path} is exhausted: model call {n} has no entry "
                f"(the script has {len(entries)})",
            )
        entry = entries[n]
        if not isinstance(entry, dict):
            raise ModelError("scripted", f"script {self.path}: entry {n} must be an object")
        if entry.get("error"):
            raise ModelError("scripted", str(entry["error"]))
        text = str(entry.get("text") or "")
        calls = [_tool_call(c, n, i) for i, c in enumerate(entry.get("tool_calls") or [])]
        shown = entry.get("reasoning")  # what a model showed of its reasoning (plain text)
        if shown:
            await _stream(str(shown), float(entry.get("reasoning_delay") or 0), on_reasoning)
        await _stream(text, float(entry.get("delay") or 0), on_delta)
        usage = _usage(entry.get("usage")) or estimate_usage(request, text, calls)
        reasoning: Reasoning | None = {"format": "text", "text": str(shown)} if shown else None
        return ModelResponse(text, calls, usage, "end_turn", reasoning=reasoning)


async def _stream(text: str, delay: float, on_delta: DeltaCallback | None) -> None:
    """Stream ``text`` word by word; with ``delay``, wait that long after its first delta."""
    if delay and on_delta is not None and text:
        await on_delta(text[:1])
        await asyncio.sleep(delay)
        await stream_words(text[1:], on_delta)
        return
    if delay:
        await asyncio.sleep(delay)
    await stream_words(text, on_delta)


def _usage(raw: Any) -> Usage | None:
    """An entry's ``usage`` (``input``, ``output``, ``cache_read``, ``cache_write``,
    ``reasoning``: what a provider would report), or None for an estimate."""
    if not isinstance(raw, dict):
        return None
    number = {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}
    return Usage(
        input_tokens=number.get("input", 0),
        output_tokens=number.get("output", 0),
        cache_read_tokens=number.get("cache_read", 0),
        cache_write_tokens=number.get("cache_write", 0),
        reasoning_tokens=number.get("reasoning", 0),
    )


def _tool_call(raw: JSONObject, n: int, i: int) -> ToolCall:
    call_id = str(raw.get("id") or f"call_{n}_{i}")
    arguments = raw.get("arguments", {})
    if isinstance(arguments, dict):  # a copy: the parsed script is shared between turns
        copied = copy.deepcopy(arguments) if arguments else {}
        return ToolCall(call_id, str(raw.get("name")), copied)
    return ToolCall(
        call_id,
        str(raw.get("name")),
        None,
        raw_arguments=json.dumps(arguments),
        argument_error="arguments must be a JSON object",
    )
