"""`sessions()` reads only the tail of each session's events: its rows must equal the fold of
every event, whatever state the session is in."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from eve_cli.execution._view import fold
from eve_cli.runtime import Runtime
from eve_cli.runtime._reader import _same
from tests.eve_cli.rt_support import AgentFactory, call, reply, tool_file

TOOLS = tool_file('''
    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    @tool(approval=always())
    def launch(target: str) -> str:
        """Needs approval."""
        return f"launched {target}"
''')

SCRIPT = [
    reply("", call("noop"), call("noop")),  # turn 1: three steps
    reply("", call("noop")),
    reply("one"),
    reply("two"),  # turn 2: one step
    reply("", call("launch", target="x")),  # turn 3: parks on an approval
    reply("launched"),
    reply("", call("ask_question", question="Which?")),  # turn 4: parks on a question
    reply("thanks"),
]


def full_row(rt: Runtime, sid: str) -> dict[str, Any]:
    view = fold(sid, rt.events(sid))
    row = {k: view[k] for k in ("id", "status", "parkedOn", "steps", "updatedAt")}
    row["turns"] = len(view["turns"])
    return row


def listed(rt: Runtime, sid: str) -> dict[str, Any]:
    [row] = [r for r in rt.sessions() if r["id"] == sid]
    assert (row["bytes"] or 0) > 0
    return {k: row[k] for k in ("id", "status", "parkedOn", "steps", "updatedAt", "turns")}


def test_rows_from_the_last_turn_equal_the_full_fold(
    make_agent: AgentFactory, tmp_path: Path
) -> None:
    agent = make_agent(script=SCRIPT, tools={"t": TOOLS})
    rt = Runtime(data_dir=tmp_path / "data", agent_dir=agent)
    seen: list[tuple[str, str | None, int, int]] = []
    fast: list[bool] = []  # the row came from the head's note (nothing appended since)

    async def main() -> None:
        sid = await rt.create_session()

        def check() -> None:
            full = full_row(rt, sid)
            row = listed(rt, sid)
            assert row == full
            note = (rt.world.heads(roots=[sid])[0].head or {}).get("note") or {}
            fast.append(_same(note.get("events"), rt.reader.event_count(sid)))
            seen.append((row["status"], row["parkedOn"], row["turns"], row["steps"]))

        check()  # created, never driven
        await rt.drive(sid)
        check()
        for text in ("go", "again", "launch"):
            await rt.deliver(sid, text)
            await rt.drive(sid)
            check()
        [request] = rt.session(sid)["pending"]
        await rt.respond(sid, [{"requestId": request["requestId"], "approved": True}])
        await rt.drive(sid)
        check()
        receipt = await rt.deliver(sid, "ask me")
        assert receipt.disposition == "started"
        await rt.drive(sid)
        check()
        receipt = await rt.deliver(sid, "queued while parked")
        assert receipt.disposition == "queued"
        check()

    asyncio.run(main())
    rt.close()
    assert fast[1:] == [True] * (len(fast) - 1)
    assert seen == [
        ("waiting", None, 0, 0),
        ("waiting", None, 0, 0),
        ("waiting", None, 1, 3),
        ("waiting", None, 2, 4),
        ("parked", "approval", 3, 5),
        ("waiting", None, 3, 6),
        ("parked", "question", 4, 7),
        ("parked", "question", 4, 7),
    ]
