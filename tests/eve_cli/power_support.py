"""Checks of a store a power cut left (tests/power_cut.py, loop-mounted ext4 images)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eve_cli.runtime import Runtime


@dataclass
class Ack:
    """What the workload was told, and when (moments before this one need not keep it)."""

    at: int
    turns: list[Any] = field(default_factory=list)  # the session's turns as then shown
    delivered: str | None = None  # a message whose delivery was acknowledged


def turns_of(view: Mapping[str, Any]) -> list[Any]:
    """Each turn's input, and each step's text and finished actions."""
    return [
        (
            turn["id"],
            turn.get("input"),
            [(step.get("text"), _finished(step)) for step in turn["steps"]],
        )
        for turn in view["turns"]
    ]


def _finished(step: dict[str, Any]) -> list[Any]:
    actions = [a for a in step.get("actions", []) if a.get("status") == "completed"]
    return [(a["callId"], a["name"], a.get("status"), a.get("output")) for a in actions]


def shown(events: Sequence[Mapping[str, Any]]) -> dict[int, Any]:
    """The events as a reader shows them, without times."""
    drop = {"at", "index", "sessionId", "durationMs", "continuationToken"}
    return {e["index"]: sorted((k, repr(v)) for k, v in e.items() if k not in drop) for e in events}


def check_store(
    data: Path, agent: Path, sid: str, required: list[Ack], log: Path, where: str
) -> bool:
    """Check the store ``data`` a cut left against what was acknowledged (``required``), then
    resume session ``sid`` there; False when the store holds no session (nothing required)."""
    rt = Runtime(data_dir=data, agent_dir=agent)  # every state opens
    try:
        if sid not in {row["id"] for row in rt.sessions()}:
            assert not required, f"{where}: the acknowledged session is gone"
            return False
        before = rt.session(sid)
        for ack in required:
            now = turns_of(before)
            for turn in ack.turns:
                match = [t for t in now if t[0] == turn[0]]
                assert match, f"{where}: acknowledged turn {turn[0]} is gone"
                assert match[0][1] == turn[1], f"{where}: turn {turn[0]} input differs"
                steps = match[0][2]
                differs = f"{where}: turn {turn[0]} differs: {turn[2]} -> {steps}"
                assert len(steps) >= len(turn[2]), differs
                for (text, actions), (now_text, now_actions) in zip(turn[2], steps, strict=False):
                    # the same text, and the actions finished then (more may have since)
                    assert text == now_text and set(actions) <= set(now_actions), differs
        events = shown(rt.events(sid))
        results = {e["callId"] for e in rt.events(sid) if e["type"] == "action.result"}
        ran_before = len(log.read_text().splitlines()) if log.exists() else 0
        asyncio.run(rt.drive(sid))
        after = shown(rt.events(sid))
        for index, event in events.items():
            assert after.get(index) == event, (
                f"{where}: event {index} changed on resume: {event} -> {after.get(index)}"
            )
        lines = log.read_text().splitlines()[ran_before:] if log.exists() else []
        again = [line for line in lines if line.split(":")[-1] in results]
        assert not again, f"{where}: a tool whose result was shown ran again: {again}"
        received = {e.get("text") for e in rt.events(sid) if e["type"] == "message.received"}
        for ack in required:
            if ack.delivered is not None:
                assert ack.delivered in received, (
                    f"{where}: delivery {ack.delivered!r} lost; events after the resume: "
                    f"{[(e['type'], e.get('text') or e.get('error')) for e in rt.events(sid)]}"
                )
        return True
    finally:
        rt.close()
