"""Replaying a cassette against the current agent definition (SPEC §15: `eve replay`).

The recorded turns run again in a session of their own on a `MemoryWorld`, on the current
definition of the agent folder, with the model's recorded answers (the cassette is a
``scripted:`` script) and the tools' recorded results: every tool is the current one — its
schema, its approval policy — except that running it returns what the recording got (no side
effect), unless it is named in ``live_tools`` (run for real, its result compared). Approvals
and questions are answered as they were. The replay's events are turned into a recording the
same way as the stored session's (`_cassette.recording`) and the two compared, so unchanged
code reports nothing. Each difference is a `Divergence`:

* ``tool-missing`` / ``subagent-missing``: the model called a tool (a sub-agent) that no
  longer exists;
* ``arguments-rejected``: the tool now rejects the recorded arguments;
* ``approval-changed``: the approval policy decides otherwise (asks where it ran without
  asking, runs where it asked, denies);
* ``result-changed``: a call's result differs (a live tool's, or one the change caused);
* ``compaction-moved``: history is compacted at other steps;
* ``outcome-changed``: the turn ends otherwise (it fails now, say);
* ``trajectory`` (``live_model``): the live model calls other tools, or other arguments, than
  the recording did, from that call on.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Iterable
from itertools import zip_longest
from pathlib import Path
from typing import Any, TypedDict

from eve_cli._agent_api import ToolContext, always, never
from eve_cli._cassette import Call, Cassette, Turn, recording
from eve_cli._events import Event
from eve_cli._json import JSONObject
from eve_cli._loader import AgentDefinition
from eve_cli._tools import InvalidArguments, Tool, ToolResult
from eve_cli.execution import PendingView
from eve_cli.mcp import server_of
from eve_cli.models import context_window_for

NOT_RECORDED = "(replay) this call was not recorded, so nothing ran"

_POLICY_DENIED = "The approval policy denied this call."
_TASK: JSONObject = {
    "type": "object",
    "properties": {"task": {"type": "string"}},
    "required": ["task"],
    "additionalProperties": False,
}


class DivergenceRecord(TypedDict):
    """A divergence as ``eve replay --json`` shows it."""

    kind: str
    turn: int
    step: int | None
    call: str | None
    message: str


@dataclasses.dataclass(frozen=True)
class Divergence:
    """One point where the current code behaves otherwise than the recording."""

    kind: str
    turn: int  # from 1
    step: int | None
    call: str | None  # the call id, when it is about a call
    message: str  # one line a person reads

    def as_dict(self) -> DivergenceRecord:
        return {
            "kind": self.kind,
            "turn": self.turn,
            "step": self.step,
            "call": self.call,
            "message": self.message,
        }


@dataclasses.dataclass
class ReplayReport:
    """What a replay found: its divergences, the turns as the replay made them, and the
    replay session's events."""

    divergences: list[Divergence]
    turns: list[Turn]
    events: list[Event] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.divergences


class Recorded:
    """The recorded calls of a cassette: looked up by call id, or — a live model's calls
    have other ids — by name and arguments, each recorded call used once, in order."""

    def __init__(self, turns: Iterable[Turn]) -> None:
        self.calls: dict[str, Call] = {}
        self._by_value: dict[tuple[str, str], list[Call]] = {}
        for turn in turns:
            for call in turn["calls"]:
                self.calls[str(call.get("callId"))] = call
                self._by_value.setdefault(_value(call), []).append(call)
        self._used: set[str] = set()

    def find(self, call_id: str, name: str, arguments: Any) -> Call | None:
        call = self.calls.get(call_id)
        if call is None or call.get("name") != name:
            left = [c for c in self._by_value.get((name, _canon(arguments)), [])
                    if str(c.get("callId")) not in self._used]  # fmt: skip
            call = left[0] if left else None
        if call is not None:
            self._used.add(str(call.get("callId")))
        return call


def _canon(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, default=str)


def _value(call: Call) -> tuple[str, str]:
    return str(call.get("name")), _canon(call.get("arguments"))


@dataclasses.dataclass(frozen=True)
class RecordedTool(Tool):
    """A tool of the current definition whose run returns the recorded result (``live``:
    runs for real)."""

    recorded: Recorded | None = None
    live: bool = False

    async def execute(
        self,
        arguments: JSONObject | None,
        ctx: ToolContext,
        *,
        wait: float = 0.0,
        checked: dict[str, Any] | None = None,
        remaining: float | None = None,
    ) -> ToolResult:
        if self.live or self.recorded is None:
            return await super().execute(
                arguments, ctx, wait=wait, checked=checked, remaining=remaining
            )
        try:
            if checked is None:
                self.validate(arguments)
        except InvalidArguments as exc:
            return ToolResult(f"Invalid arguments for tool {self.name!r}: {exc}", is_error=True)
        call = self.recorded.find(ctx.call_id, self.name, arguments)
        if call is None or call.get("output") is None:
            return ToolResult(NOT_RECORDED, is_error=True)
        return ToolResult(str(call.get("output")), bool(call.get("isError")))


def stubbed(
    agent: AgentDefinition, recorded: Recorded, live: Iterable[str], model: str | None
) -> AgentDefinition:
    """``agent`` with every tool answered from ``recorded`` (except ``live`` ones) and each
    sub-agent a tool answered so too (its own turns are not replayed); ``model``: the model
    the recording used, whose context window compaction is reckoned against."""
    live = set(live)
    tools: dict[str, Tool] = {
        name: RecordedTool(**_fields(tool), recorded=recorded, live=name in live)
        for name, tool in agent.tools.items()
    }
    for name, sub in agent.subagents.items():
        tools[name] = RecordedTool(
            name, f"Delegate a task to the {name} sub-agent: {sub.description}", _TASK,
            never(), None, None, recorded=recorded,
        )  # fmt: skip
    servers = {spec.name for spec in agent.mcp}
    for call in recorded.calls.values():  # MCP servers are not started: their calls answered
        name = str(call.get("name"))
        if server_of(name) in servers and name not in tools:
            policy = always() if call.get("asked") == "approval" else never()
            tools[name] = RecordedTool(name, "", {}, policy, None, None, recorded=recorded)
    config = agent.config
    kind, _, name = (model or agent.model).partition(":")
    if config.context_window is None and kind in ("openai", "anthropic") and name:
        config = dataclasses.replace(config, context_window=context_window_for(kind, name))
    return dataclasses.replace(agent, tools=tools, subagents={}, config=config, mcp=())


def _fields(tool: Tool) -> dict[str, Any]:
    return {f.name: getattr(tool, f.name) for f in dataclasses.fields(Tool)}


async def play(
    tape: Cassette,
    agent_dir: Path | str | None,
    *,
    live_tools: Iterable[str] = (),
    live_model: str | None = None,
) -> ReplayReport:
    """Run ``tape``'s turns on the current definition of ``agent_dir`` (see the module);
    ``live_model``: a model string to ask instead of the recorded answers."""
    from eve_cli.runtime import Runtime
    from world import MemoryWorld

    with tempfile.TemporaryDirectory(prefix="eve-replay-") as tmp:
        script = Path(tmp) / "cassette.json"
        script.write_text(json.dumps(tape), encoding="utf-8")
        rt = Runtime(agent_dir=agent_dir, model=live_model or f"scripted:{script}",
                     world=MemoryWorld())  # fmt: skip
        try:
            live = list(live_tools)
            unknown = sorted(set(live) - set(rt.agent.tools))
            if unknown:
                raise ValueError(f"--live-tools: no tool {unknown[0]!r} in {rt.agent.directory}")
            recorded = Recorded(tape["turns"])
            rt.executor.pin(rt.agent_dir, stubbed(rt.agent, recorded, live, tape.get("model")))
            sid = await rt.create_session()
            for turn in tape["turns"]:
                await _replay_turn(rt, sid, turn, recorded)
            events = rt.events(sid)
            _, turns = recording(events)
        finally:
            rt.close()
    found = compare(tape["turns"], turns, live=live_model is not None)
    return ReplayReport(found, turns, events)


async def _replay_turn(rt: Any, sid: str, turn: Turn, recorded: Recorded) -> None:
    await rt.deliver(sid, turn["message"])
    view = await rt.drive(sid)
    for _ in range(64):  # a turn asks a bounded number of times; this bounds a broken one
        if view["status"] != "parked" or not view["pending"]:
            return
        answers = [_answer(request, recorded) for request in view["pending"]]
        if any(a is None for a in answers):
            return  # the recording left it waiting here too
        await rt.respond(sid, answers)
        view = await rt.drive(sid)


def _answer(request: PendingView, recorded: Recorded) -> dict[str, Any] | None:
    """The recorded answer to ``request``; a request the recording never made is approved
    (the recording ran that call) or answered empty; None: the recording did not answer."""
    call = recorded.calls.get(str(request.get("callId")))
    answer = call.get("answer") if call is not None else None
    if call is not None and call.get("asked") and answer is None:
        return None
    if answer is None:
        answer = {"answer": ""} if request.get("kind") == "question" else {"approved": True}
    return {"requestId": request["requestId"], **answer}


def compare(recorded: list[Turn], replayed: list[Turn], *, live: bool = False) -> list[Divergence]:
    """Where ``replayed`` departs from ``recorded`` (see the module)."""
    found: list[Divergence] = []
    for n, (was, now) in enumerate(zip_longest(recorded, replayed), 1):
        if was is None:
            continue
        if now is None:
            found.append(Divergence("outcome-changed", n, None, None, f"turn {n} did not run"))
            continue
        if live:
            found.extend(_trajectory(n, was, now))
        else:
            done = {str(c.get("callId")): c for c in now["calls"]}
            for call in was["calls"]:
                got = done.get(str(call.get("callId")))
                if got is not None:
                    found.extend(_call_divergence(n, call, got))
        if was["compactions"] != now["compactions"] and not live:
            found.append(Divergence(
                "compaction-moved", n, None, None,
                f"turn {n}: history compacted at step(s) {now['compactions'] or 'none'}, "
                f"recorded at {was['compactions'] or 'none'}",
            ))  # fmt: skip
        if was["outcome"] != now["outcome"] and was["outcome"] != "cancelled":
            why = f" ({now['error']})" if now.get("error") else ""
            found.append(Divergence(
                "outcome-changed", n, None, None,
                f"turn {n} ended {now['outcome']}{why}, recorded {was['outcome']}",
            ))  # fmt: skip
    return found


def _call_divergence(n: int, was: Call, now: Call) -> list[Divergence]:
    name, step, cid = was.get("name"), was.get("step"), str(was.get("callId"))
    where = f"turn {n} step {step}: {name}"
    out, old = str(now.get("output") or ""), str(was.get("output") or "")

    def one(kind: str, message: str) -> list[Divergence]:
        return [Divergence(kind, n, step, cid, f"{where}: {message}")]

    if _gone(out) and not _gone(old) and now.get("isError"):
        kind = "subagent-missing" if was.get("subagent") else "tool-missing"
        return one(kind, "no longer exists" + (" (a sub-agent)" if was.get("subagent") else ""))
    if out.startswith(f"Invalid arguments for tool {name!r}") and not old.startswith("Invalid"):
        return one("arguments-rejected", f"now rejects the recorded arguments: {out}")
    if asking := _asking_changed(was, now):
        return one("approval-changed", asking)
    if out == _POLICY_DENIED and old != _POLICY_DENIED:
        return one("approval-changed", "the approval policy now denies it")
    if (out, bool(now.get("isError"))) != (old, bool(was.get("isError"))):
        return one("result-changed", f"result {out[:200]!r}, recorded {old[:200]!r}")
    return []


def _asking_changed(was: Call, now: Call) -> str | None:
    """How a call's asking for approval changed, if it did."""
    if was.get("asked") == now.get("asked"):
        return None
    if now.get("asked") == "approval":
        return "now asks for approval (it ran without asking)"
    if was.get("asked") == "approval":
        return "now runs without asking (it asked for approval)"
    return None


def _gone(output: str) -> bool:
    """The harness's words for a call of a tool that is not there (asked, or approved)."""
    return output.startswith("Unknown tool") or output.endswith("no longer exists")


def _trajectory(n: int, was: Turn, now: Turn) -> list[Divergence]:
    """The first call where a live model's turn departs from the recording's."""
    before = [_value(c) for c in was["calls"]]
    after = [_value(c) for c in now["calls"]]
    for i, (a, b) in enumerate(zip_longest(before, after)):
        if a != b:
            said = f"{b[0]}({b[1]})" if b else "no further call"
            expected = f"{a[0]}({a[1]})" if a else "no further call"
            return [Divergence("trajectory", n, None, None,
                               f"turn {n}, call {i + 1}: the model now makes {said}; the "
                               f"recording made {expected}")]  # fmt: skip
    return []
