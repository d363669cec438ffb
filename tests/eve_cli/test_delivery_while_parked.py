"""D7 with a turn parked on an approval: a message sent meanwhile is queued for the next turn
(as the receipt says), never folded between the tool call and its result. Found by the chaos
suite (an `eve start` restart replayed the parked turn and took the message as a steer)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import DANGER_TOOL, call, reply, write_agent


def test_a_message_sent_while_parked_is_queued_for_the_next_turn(isolated: Path) -> None:
    script = [reply("", call("danger", x=1)), reply("done one"), reply("done two")]
    agent = write_agent(isolated / "agent", script=script, tools={"danger": DANGER_TOOL})

    async def main() -> list[tuple[str, str | None, str | None]]:
        rt = Runtime(isolated / "data", agent_dir=agent)
        sid = await rt.create_session()
        await rt.deliver(sid, "first")
        assert (await rt.drive(sid))["status"] == "parked"
        assert (await rt.deliver(sid, "second")).disposition == "queued"
        view = await rt.drive(sid)  # wakes on the message: still parked on the approval
        assert view["status"] == "parked"
        [request] = view["pending"]
        await rt.respond(sid, [{"requestId": request["requestId"], "approved": True}])
        assert (await rt.drive(sid))["status"] == "waiting"
        kinds = ("message.received", "input.resolved", "turn.completed", "message.completed")
        events = [(e["type"], e.get("turnId"), e.get("text")) for e in rt.events(sid)
                  if e["type"] in kinds]  # fmt: skip
        rt.close()
        return events

    assert asyncio.run(main()) == [
        ("message.received", "t1", "first"),
        ("message.completed", "t1", ""),
        ("input.resolved", "t1", None),
        ("message.completed", "t1", "done one"),
        ("turn.completed", "t1", None),
        ("message.received", "t2", "second"),
        ("message.completed", "t2", "done two"),
        ("turn.completed", "t2", None),
    ]
