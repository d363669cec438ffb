"""The phase a session's events leave it in, and the receipt a message gets there."""

from __future__ import annotations

import asyncio
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest

from eve_cli.execution._receipts import Phase, decide, phase, taken
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, reply
from tests.worlds import WorldOpener
from world._family import Family


def _events(*kinds: str, **data: Any) -> list[dict[str, Any]]:
    return [{"type": kind, **data} for kind in kinds]


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        ((), "between"),
        (("turn.started",), "busy"),
        (("turn.started", "step.started", "step.completed"), "ending"),
        (("turn.started", "step.completed", "step.started"), "busy"),
        (("turn.started", "input.requested", "turn.waiting"), "parked"),
        (("turn.started", "turn.waiting", "input.requested"), "parked"),  # still waiting
        (("turn.started", "turn.waiting", "input.resolved"), "busy"),
        (("turn.started", "turn.waiting", "task.settled"), "busy"),
        (("turn.started", "turn.waiting", "step.completed"), "parked"),
        (("turn.started", "step.completed", "event.lost"), "ending"),
        (("turn.started", "turn.completed"), "between"),
        (("turn.started", "context.cleared"), "between"),
    ],
)
def test_the_phase_after_events(kinds: tuple[str, ...], expected: Phase) -> None:
    assert phase(_events(*kinds)) == expected


def test_a_task_whose_turn_ended_is_ending_until_the_session_ends() -> None:
    """A task session's one turn is followed by the session's end: between the two, a
    message is not going to start a turn (the sender waits for the end: rejected)."""
    for end in ("turn.completed", "turn.failed", "turn.cancelled"):
        assert phase(_events("turn.started", end), task=True) == "ending"
        assert phase(_events("turn.started", end)) == "between"
    assert phase(_events("turn.started", "turn.completed", "session.completed"), task=True) == (
        "ended"
    )
    assert phase(_events("session.started", "session.waiting"), task=True) == "between"


def test_a_sleeping_turn_is_busy_a_steer_wakes_it() -> None:
    assert phase(_events("turn.started") + _events("turn.waiting", on="sleep")) == "busy"
    assert phase(_events("turn.started") + _events("turn.waiting", on="input")) == "parked"


def test_the_receipt_in_each_phase() -> None:
    assert decide("between", "steer", ahead=False) == "started"
    assert decide("between", "queue", ahead=False) == "started"
    assert decide("between", "steer", ahead=True) == "steered"
    assert decide("between", "queue", ahead=True) == "queued"
    assert decide("busy", "steer", ahead=False) == "steered"
    assert decide("busy", "queue", ahead=False) == "queued"
    assert decide("parked", "steer", ahead=False) == "queued"
    assert decide("ending", "steer", ahead=False) is None  # wait for the turn's next event
    assert decide("ending", "queue", ahead=False) == "queued"


def test_a_taken_message_has_the_disposition_its_event_names() -> None:
    events = [
        {"type": "message.received", "deliveryId": 3, "disposition": "started"},
        {"type": "message.received", "deliveryId": 4},
    ]
    assert taken(events) == {3: "started", 4: "steered"}


def test_a_queued_message_keeps_the_disposition_its_turn_decided() -> None:
    """A turn that holds a message for the next says so (``message.queued``); the next turn
    starting with it does not change what the sender was told."""
    events: list[dict[str, Any]] = [
        {"type": "message.queued", "deliveryId": 5},
        {"type": "turn.completed"},
        {"type": "message.received", "deliveryId": 5, "disposition": "started"},
    ]
    assert taken(events) == {5: "queued"}


def test_each_receipt_is_what_the_turn_recorded(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    """Messages sent while a turn runs: a steer one is folded in, a queue one is held, and
    the turn records each with its delivery id (the receipt's word) as it takes it."""
    agent = make_agent(script=[reply("working", delay=0.5), reply("second"), reply("third")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session()
        await rt.deliver(sid, "first")
        driving = asyncio.create_task(rt.drive(sid))
        async for event in rt.tail(sid):
            if event["type"] == "message.appended":
                break
        steer = await rt.deliver(sid, "folded in")
        queue = await rt.deliver(sid, "held", turn_policy="queue")
        assert (steer.disposition, queue.disposition) == ("steered", "queued")
        await asyncio.wait_for(driving, 10)
        await rt.drive(sid)
        events = rt.events(sid)
        decided = {e["deliveryId"]: e for e in events if e["type"] == "message.queued"}
        received = {e["text"]: e for e in events if e["type"] == "message.received"}
        assert received["folded in"]["disposition"] == "steered"
        assert received["folded in"]["turnId"] == "t1"
        held = received["held"]  # it started the next turn
        assert held["disposition"] == "started" and held["turnId"] == "t2"
        assert decided[held["deliveryId"]]["turnId"] == "t1"  # t1 decided: queued
        assert taken(events)[held["deliveryId"]] == "queued"
        rt.close()

    asyncio.run(main())


@pytest.mark.parametrize("end", ["session.completed", "session.failed", "session.cancelled"])
def test_a_session_that_ended_takes_no_message(end: str) -> None:
    assert phase(_events("turn.started", "turn.completed", end)) == "ended"
    for policy in ("steer", "queue"):
        for ahead in (False, True):
            assert decide("ended", policy, ahead=ahead) == "rejected"


def test_a_task_session_refuses_a_message_held_for_a_next_turn(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    """A task runs one turn: a message queued for the next would never be taken, so it is
    rejected before anything is stored; one steered into the turn is taken."""
    agent = make_agent(script=[reply("working", delay=0.5), reply("done")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session(mode="task")
        await rt.deliver(sid, "the task")
        driving = asyncio.create_task(rt.drive(sid))
        async for event in rt.tail(sid):
            if event["type"] == "message.appended":
                break
        held = await rt.deliver(sid, "for later", turn_policy="queue")
        assert held.disposition == "rejected"
        assert held.reason is not None and "task session runs one turn" in held.reason
        steer = await rt.deliver(sid, "and this")
        assert steer.disposition == "steered"
        view = await asyncio.wait_for(driving, 10)
        assert view["status"] == "completed"
        texts = [e.get("text") for e in rt.events(sid) if e["type"] == "message.received"]
        assert texts == ["the task", "and this"]  # the rejected one never reached a turn
        rt.close()

    asyncio.run(main())


def _send_late(agent: Path, data: Path, sid: str, read: threading.Event) -> Any:
    """Another client of the store delivers a message to ``sid``; ``read`` is set once it
    has read the session's events (or given up). Its receipt."""

    async def go() -> Any:
        other = Runtime(agent_dir=agent, data_dir=data)
        client = other.client
        events_around = client._events_around

        def read_events(*args: Any) -> Any:
            try:
                return events_around(*args)
            finally:
                read.set()

        setattr(client, "_events_around", read_events)  # noqa: B010 (an instance's own)
        try:
            return await other.deliver(sid, "too late for the first turn")
        finally:
            read.set()
            other.close()

    return asyncio.run(go())


def test_a_message_delivered_after_a_turn_s_final_poll_is_not_told_steered(
    make_agent: AgentFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moment staged: the turn's final poll (its look after its one step) finds the inbox
    unchanged (`Family.read_inbox` returns early, without making the step's events readable);
    then, before the turn goes on, another client delivers a message and reads the session's
    events. The turn ends without it; it starts the next turn: its receipt must say so."""
    agent = make_agent(script=[reply("first answer"), reply("second answer")])
    data = tmp_path / "data"
    read, receipts, answered = threading.Event(), list[Any](), list[str]()
    session, senders = list[str](), list[threading.Thread]()
    original = Family.read_inbox

    def read_inbox(self: Family, world: Any) -> bool:
        found = original(self, world)
        callers = {f.name for f in traceback.extract_stack(limit=12)}
        answered.extend(["model"] if "model_round" in callers else [])  # the step's own look
        if not found and answered and "take" in callers and not read.is_set():
            # The turn's final poll, nothing came: the sender goes before the turn goes on.
            sender = threading.Thread(
                target=lambda: receipts.append(_send_late(agent, data, session[0], read))
            )
            sender.start()
            assert read.wait(30)
            senders.append(sender)
        return found

    monkeypatch.setattr(Family, "read_inbox", read_inbox)

    async def main() -> None:
        rt = Runtime(agent_dir=agent, data_dir=data)
        session.append(await rt.create_session())
        await rt.deliver(session[0], "first")
        await rt.drive(session[0])
        await asyncio.to_thread(senders[0].join, 30)
        await rt.drive(session[0])
        [receipt] = receipts
        events = rt.events(session[0])
        became = {e["text"]: e["disposition"] for e in events if e["type"] == "message.received"}
        assert became == {"first": "started", "too late for the first turn": "started"}
        assert receipt.disposition == "started", "told steered, but it started the next turn"
        rt.close()

    asyncio.run(main())
