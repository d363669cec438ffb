"""Declared side effects (SPEC §16): an interrupted `unsafe` call is never run again unasked
(the turn parks on an "outcome unknown" request with three answers), `idempotent` and `none`
calls run again as before, progress a tool records survives, and a tool's timeout counts
across restarts. On every World: a drive cancelled while the tool runs is what a crash
leaves (the kill -9 proof is in test_tool_effects_kill.py). Every tool appends to a log, so
the tests count how often each really ran."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from eve_cli.harness._effects import TREATED_AS_FAILED
from tests.eve_cli.effects_support import Case
from world import World


@pytest.mark.parametrize("answer", ["rerun", "failed", "result"])
def test_an_interrupted_unsafe_call_parks_on_outcome_unknown_and_each_answer_works(
    tmp_path: Path, world: World, answer: str
) -> None:
    case = Case(tmp_path, world, "charge", amount=5)
    case.stall()
    case.interrupted()
    view = case.drive()
    assert (view["status"], view["parkedOn"]) == ("parked", "outcome")
    [request] = view["pending"]
    assert request["kind"] == "outcome" and request["tool"] == "charge"
    assert request["arguments"] == {"amount": 5}
    assert case.runs()["charge 5"] == 1  # not run again unasked
    assert case.drive()["status"] == "parked" and case.runs()["charge 5"] == 1
    response: dict[str, Any] = {"requestId": request["requestId"], "outcome": answer}
    if answer == "result":
        response["result"] = "charged 5 (checked by hand)"
    receipt = asyncio.run(case.rt.respond(case.sid, [response]))
    assert receipt.disposition == "accepted", receipt
    assert case.drive()["status"] == "waiting"
    message = case.tool_message()
    expected = {
        "rerun": ("charged 5", False, 2),
        "failed": (TREATED_AS_FAILED, True, 1),
        "result": ("charged 5 (checked by hand)", False, 1),
    }[answer]
    assert (message["content"], message["is_error"], case.runs()["charge 5"]) == expected


def test_an_answer_of_the_wrong_shape_is_refused_before_it_is_stored(
    tmp_path: Path, world: World
) -> None:
    case = Case(tmp_path, world, "charge", amount=1)
    case.stall()
    case.interrupted()
    [request] = case.drive()["pending"]
    for bad in ({"approved": True}, {"outcome": "maybe"}, {"outcome": "result"}):
        receipt = asyncio.run(
            case.rt.respond(case.sid, [{"requestId": request["requestId"], **bad}])
        )
        assert receipt.disposition == "rejected" and "outcome" in (receipt.reason or "")
    assert case.drive()["status"] == "parked"


@pytest.mark.parametrize(("name", "arguments", "line"), [
    ("store", {"key": "k"}, None), ("look", {"path": "p"}, "look p"),
])  # fmt: skip
def test_idempotent_and_none_calls_run_again_after_an_interruption(
    tmp_path: Path,
    world: World,
    name: str,
    arguments: dict[str, Any],
    line: str | None,
) -> None:
    case = Case(tmp_path, world, name, **arguments)
    case.stall()
    case.interrupted()
    assert case.drive()["status"] == "waiting"
    line = line or f"store {case.sid}:t1:call_0_0"  # the same idempotency key both times
    assert case.runs()[line] == 2
    assert case.tool_message()["is_error"] is False


def test_an_unsafe_tool_that_recorded_its_progress_resumes_with_it(
    tmp_path: Path, world: World
) -> None:
    case = Case(tmp_path, world, "send", to="ada")
    case.stall()
    case.interrupted()
    assert case.drive()["status"] == "waiting"  # no question: it knew how far it got
    assert case.runs() == Counter({"send": 1, "stalled": 1, "resumed True m-1": 1})
    assert case.tool_message()["content"] == "sent as m-1"


def test_a_sync_tool_records_its_progress_from_its_thread(tmp_path: Path, world: World) -> None:
    case = Case(tmp_path, world, "send_sync", to="bob")
    case.stall()
    case.interrupted()
    assert case.drive()["status"] == "waiting"
    assert case.runs() == Counter({"send": 1, "stalled": 1, "resumed True s-1": 1})


def test_a_timeout_cancels_an_async_tool_and_counts_the_time_before_a_restart(
    tmp_path: Path, world: World
) -> None:
    case = Case(tmp_path, world, "slow", n=1)
    case.stall()
    began = time.monotonic()
    case.interrupted(after=1.0)  # of its 1.5 s
    case.drive()
    message = case.tool_message()
    assert message["is_error"] and "timed out after 1.5 s" in message["content"]
    [result] = [e for e in case.rt.events(case.sid) if e["type"] == "action.result"]
    # The resumed run had what was left (at most 0.5 s; none on a slow machine: then it does
    # not run at all), not the whole 1.5 s again.
    assert result["durationMs"] < 1000, result
    assert time.monotonic() - began < 10
    assert case.runs()["slow"] == (2 if result["durationMs"] else 1)


def test_a_sync_tool_past_its_timeout_is_a_tool_error(tmp_path: Path, world: World) -> None:
    case = Case(tmp_path, world, "slow_sync", n=1)
    began = time.monotonic()
    asyncio.run(case.rt.deliver(case.sid, "go"))
    view = case.drive()
    # Not the tool's 3 s: the turn went on at its 0.3 s timeout (with room for a loaded machine).
    assert view["status"] == "waiting" and time.monotonic() - began < 2.7
    message = case.tool_message()
    assert message["is_error"] and "timed out after 0.3 s" in message["content"]


def test_effects_and_timeout_are_checked_where_the_tool_is_declared() -> None:
    from eve_cli import tool

    with pytest.raises(ValueError, match="effects must be one of none, idempotent, unsafe"):
        tool(effects="maybe")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
        tool(timeout=0)
