"""Cassettes: a recorded session as self-contained JSON (SPEC §15), and reading one back.

A cassette holds what a replay needs and nothing of the store: the model's answers in call
order (``responses``, the form the ``scripted:`` model reads, so ``-m scripted:CASSETTE`` plays
it), and per turn the user's message, each tool call with its arguments, whether it waited for
an approval, the answer given, and its result, plus where compactions happened and how the
turn ended. It is derived from a session's §8 events (:func:`recording`), the same way for a
stored session and for its replay, so comparing the two is comparing like with like.

Never in a cassette: the session's continuation token, values of the environment's (and
``.env``'s) secret-looking variables (replaced by ``[secret]`` wherever they occur), and what a
``redact`` rule matches in tool results and arguments (``[redacted]``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from eve_cli._session import Resolution
    from eve_cli.models import ScriptEntry

CASSETTE = "eve-cassette"
VERSION = 1
SECRET = "[secret]"
REDACTED = "[redacted]"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_NOT_A_MODEL_CALL = ("stopped at the", "limit reached")  # step.failed before any model call


class Call(TypedDict, total=False):
    """One tool (or sub-agent) call of a turn as recorded."""

    callId: str
    name: str
    arguments: Any
    step: int
    asked: str | None  # approval | question: the request the call waited for, if any
    answer: Resolution | None  # {"approved": bool} | {"answer": str}
    status: str | None
    isError: bool
    output: str | None
    subagent: bool


class Turn(TypedDict):
    """One turn: the message that started it, its calls, its compactions, its end."""

    message: str
    calls: list[Call]
    compactions: list[int]  # step indexes where history was compacted
    outcome: str  # completed | waiting | parked | failed | cancelled | running
    error: str | None


class Cassette(TypedDict, total=False):
    """A whole cassette (``eve export``)."""

    format: str
    version: int
    session: str
    agent: str | None
    model: str | None
    responses: list[ScriptEntry]
    turns: list[Turn]


class CassetteError(ValueError):
    """A file that is not a cassette this eve reads (names the file and what is wrong)."""


def recording(events: Iterable[Mapping[str, Any]]) -> tuple[list[ScriptEntry], list[Turn]]:
    """The model answers (call order) and the turns a session's events hold."""
    recorder = _Recorder()
    for event in events:
        recorder.take(event)
    return recorder.responses, recorder.turns


_OUTCOMES = {"turn.completed": "completed", "turn.failed": "failed",
             "turn.cancelled": "cancelled", "turn.waiting": "parked"}  # fmt: skip


class _Recorder:
    """Folds events into responses and turns, one handler per event type."""

    def __init__(self) -> None:
        self.responses: list[ScriptEntry] = []
        self.turns: list[Turn] = []
        self.by_id: dict[str, Turn] = {}
        self.calls: dict[str, Call] = {}
        self.called: set[tuple[Any, Any]] = set()  # (turn, step) whose model was asked
        self.handlers = {
            "message.completed": self.reply, "actions.requested": self.requested,
            "step.failed": self.failed, "input.requested": self.asked,
            "input.resolved": self.resolved, "task.started": self.task,
            "action.result": self.result, "compaction.completed": self.compacted,
        }  # fmt: skip

    def take(self, event: Mapping[str, Any]) -> None:
        kind, turn_id = str(event.get("type")), str(event.get("turnId"))
        if kind == "message.received" and event.get("disposition") != "steered":
            turn: Turn = {"message": str(event.get("text") or ""), "calls": [],
                          "compactions": [], "outcome": "running", "error": None}  # fmt: skip
            self.turns.append(turn)
            self.by_id[turn_id] = turn
            return
        found = self.by_id.get(turn_id)
        if found is None:
            return
        if kind in _OUTCOMES:
            found["outcome"], found["error"] = _OUTCOMES[kind], event.get("error")
        elif kind in self.handlers:
            self.handlers[kind](found, event)

    def reply(self, turn: Turn, event: Mapping[str, Any]) -> None:
        if not event.get("cancelled"):
            self.responses.append({"text": str(event.get("text") or ""), "tool_calls": []})
            self.called.add((event.get("turnId"), event.get("stepIndex")))

    def requested(self, turn: Turn, event: Mapping[str, Any]) -> None:
        if not self.responses:
            return
        for action in event.get("actions") or []:
            call_id, name, arguments = str(action.get("callId")), action.get("name"), action.get(
                "arguments")  # fmt: skip
            self.responses[-1]["tool_calls"].append(
                {"id": call_id, "name": name, "arguments": arguments}
            )
            call: Call = {"callId": call_id, "name": str(name), "arguments": arguments,
                          "step": int(event.get("stepIndex") or 0), "asked": None,
                          "answer": None, "status": None, "isError": False, "output": None,
                          "subagent": False}  # fmt: skip
            self.calls[call_id] = call
            turn["calls"].append(call)

    def failed(self, turn: Turn, event: Mapping[str, Any]) -> None:
        error = str(event.get("error") or "")
        asked = (event.get("turnId"), event.get("stepIndex")) in self.called
        if not asked and not error.startswith(_NOT_A_MODEL_CALL):
            self.responses.append({"error": error or "the model call failed"})

    def asked(self, turn: Turn, event: Mapping[str, Any]) -> None:
        call = self.calls.get(str(event.get("callId")))
        if call is not None:
            call["asked"] = str(event.get("kind"))

    def resolved(self, turn: Turn, event: Mapping[str, Any]) -> None:
        request = str(event.get("requestId") or "")
        call = self.calls.get(request.split(":", 1)[1] if ":" in request else request)
        if call is None:
            return
        if "answer" in event:
            call["answer"] = {"answer": event["answer"]}
        else:
            call["answer"] = {"approved": bool(event.get("approved"))}

    def task(self, turn: Turn, event: Mapping[str, Any]) -> None:
        call = self.calls.get(str(event.get("taskId")))
        if call is not None:
            call["subagent"] = True

    def result(self, turn: Turn, event: Mapping[str, Any]) -> None:
        call = self.calls.get(str(event.get("callId")))
        if call is not None:
            call["status"] = event.get("status")
            call["isError"] = bool(event.get("isError"))
            call["output"] = event.get("output")

    def compacted(self, turn: Turn, event: Mapping[str, Any]) -> None:
        if event.get("status", "completed") == "completed":
            turn["compactions"].append(int(event.get("stepIndex") or 0))


def cassette(
    session: str,
    events: Iterable[Mapping[str, Any]],
    *,
    agent: str | None,
    model: str | None,
    secrets: Iterable[str] = (),
    redact: Iterable[str] = (),
    redact_tools: Iterable[str] = (),
) -> Cassette:
    """The cassette of a session's events; ``secrets``: values never to appear (replaced
    wherever they occur); ``redact``: regular expressions replaced in tool results and
    arguments; ``redact_tools``: tools whose results are replaced whole."""
    responses, turns = recording(events)
    patterns = [re.compile(r) for r in redact]
    whole = set(redact_tools)
    for turn in turns:
        for call in turn["calls"]:
            if call.get("name") in whole:
                call["output"] = REDACTED
            call["output"] = _sub(call.get("output"), patterns)
            call["arguments"] = _sub(call.get("arguments"), patterns)
    for response in responses:
        for tool_call in response.get("tool_calls") or []:
            tool_call["arguments"] = _sub(tool_call.get("arguments"), patterns)
    out: Cassette = {"format": CASSETTE, "version": VERSION, "session": session,
                     "agent": agent, "model": model, "responses": responses,
                     "turns": turns}  # fmt: skip
    hidden = sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True)
    return _hide(out, hidden) if hidden else out


def _sub(value: Any, patterns: list[re.Pattern[str]]) -> Any:
    if not patterns:
        return value
    if isinstance(value, str):
        for pattern in patterns:
            value = pattern.sub(REDACTED, value)
        return value
    if isinstance(value, dict):
        return {k: _sub(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [_sub(v, patterns) for v in value]
    return value


def _hide(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, SECRET)
        return value
    if isinstance(value, dict):
        return {_hide(k, secrets): _hide(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_hide(v, secrets) for v in value]
    return value


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of the variables whose names say they hold a secret (keys, tokens, passwords)."""
    return [value for name, value in env.items() if _SECRET_NAME.search(name) and value]


def load(path: Path | str) -> Cassette:
    """Read a cassette; `CassetteError` naming the file and what is wrong."""
    where = Path(path)
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CassetteError(f"{where}: no such cassette") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CassetteError(f"{where}: cannot read it: {exc}") from None
    except json.JSONDecodeError as exc:
        raise CassetteError(f"{where}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict) or data.get("format") != CASSETTE:
        raise CassetteError(f"{where}: not an eve cassette (make one with: eve export SESSION)")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise CassetteError(
            f"{where}: cassette version {version!r} is newer than this eve reads ({VERSION})"
        )
    if not isinstance(data.get("responses"), list) or not isinstance(data.get("turns"), list):
        raise CassetteError(f"{where}: a cassette needs lists 'responses' and 'turns'")
    for n, turn in enumerate(data["turns"]):
        if not isinstance(turn, dict) or not isinstance(turn.get("message"), str):
            raise CassetteError(f"{where}: turn {n + 1} needs a 'message' string")
    found: Cassette = data  # type: ignore[assignment]
    return found
