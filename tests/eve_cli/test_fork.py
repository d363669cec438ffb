"""`Runtime.fork` (SPEC §15) on every world: a session forked at a turn boundary, after a step
inside a turn, or parked; tools append to a file, so what ran again shows."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from eve_cli.execution._fork import forks_stream
from eve_cli.execution._view import SessionView
from eve_cli.runtime import ForkPointError, Runtime
from eve_cli.testing import chat
from tests.eve_cli.rt_support import DANGER_TOOL, AgentFactory, call, reply, tool_file
from tests.worlds import WorldOpener
from world import FamilyHead, MemoryWorld, World


def _tick_tool(log: Path) -> str:
    return tool_file(
        f"""
        @tool
        def tick(label: str) -> str:
            \"\"\"Record a side effect.\"\"\"
            with open({str(log)!r}, "a") as f:
                f.write(label + "\\n")
            return "ticked " + label
        """
    )


def _ticks(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


SCRIPT = [
    reply("", call("tick", label="a")),  # turn 1, step 0
    reply("", call("tick", label="b")),  # turn 1, step 1
    reply("done one"),  # turn 1, step 2
    reply("", call("tick", label="c")),  # turn 2
    reply("done two"),
    reply("", call("tick", label="d")),  # whoever asks next
    reply("done three"),
]


def _texts(view: SessionView) -> list[str]:
    return [s["text"] for t in view["turns"] for s in t["steps"] if s["text"]]


def test_a_fork_after_a_step_runs_the_rest_of_the_turn_live_and_nothing_before_again(
    world: World, make_agent: AgentFactory, tmp_path: Path
) -> None:
    log = tmp_path / "ticks"
    agent = make_agent(script=SCRIPT, tools={"tick": _tick_tool(log)})

    async def go() -> None:
        rt = Runtime(agent_dir=agent, world=world)
        sid = await rt.create_session()
        await chat(rt, sid, "one")
        await chat(rt, sid, "two")
        assert _ticks(log) == ["a", "b", "c"]
        before = rt.events(sid)
        out = await rt.fork(sid, "1.0")  # after tick a, before the model asked for b
        new = out["sessionId"]
        assert out == {"sessionId": new, "forkedFrom": sid, "checkpoint": "1.0"}
        view = await rt.drive(new)
        # tick a came from the journal; the rest of turn 1 ran live, in the fork only.
        assert _ticks(log) == ["a", "b", "c", "b"]
        assert view["status"] == "waiting" and len(view["turns"]) == 1
        assert _texts(view) == ["done one"]
        view = await chat(rt, new, "again")
        assert _ticks(log) == ["a", "b", "c", "b", "c"] and _texts(view)[-1] == "done two"
        assert rt.events(sid) == before  # the original is untouched
        assert rt.lineage(sid) == {"forkedFrom": None, "forks": [new]}
        origin = rt.lineage(new)["forkedFrom"]
        assert origin is not None and origin["session"] == sid and origin["checkpoint"] == "1.0"
        view = await chat(rt, sid, "three")  # and goes on by itself
        assert _ticks(log)[-1] == "d" and _texts(view)[-1] == "done three"

    asyncio.run(go())


def test_a_fork_between_turns_has_the_history_of_then_and_runs_nothing(
    world: World, make_agent: AgentFactory, tmp_path: Path
) -> None:
    log = tmp_path / "ticks"
    agent = make_agent(script=SCRIPT, tools={"tick": _tick_tool(log)})

    async def go() -> None:
        rt = Runtime(agent_dir=agent, world=world)
        sid = await rt.create_session()
        await chat(rt, sid, "one")
        after_one = rt.history(sid)
        await chat(rt, sid, "two")
        new = (await rt.fork(sid, "1"))["sessionId"]
        view = await rt.drive(new)
        assert view["status"] == "waiting" and _ticks(log) == ["a", "b", "c"]
        assert rt.history(new) == after_one and len(view["turns"]) == 1
        with pytest.raises(ForkPointError, match=r"no checkpoint 7 \(checkpoints: 0, 1\.0"):
            await rt.fork(sid, "7")
        with pytest.raises(ValueError, match=r"--at takes TURN or TURN\.STEP"):
            await rt.fork(sid, "x.y")

    asyncio.run(go())


def test_a_parked_sessions_fork_waits_for_the_same_and_is_answered_independently(
    world: World, make_agent: AgentFactory, tmp_path: Path
) -> None:
    script = [reply("", call("danger", x=1)), reply("after")]
    agent = make_agent(script=script, tools={"danger": DANGER_TOOL})

    async def go() -> None:
        rt = Runtime(agent_dir=agent, world=world)
        sid = await rt.create_session()
        view = await chat(rt, sid, "go")
        assert view["status"] == "parked"
        new = (await rt.fork(sid))["sessionId"]
        forked = await rt.drive(new)
        assert forked["status"] == "parked" and forked["pending"] == view["pending"]
        request = view["pending"][0]["requestId"]
        await rt.respond(new, [{"requestId": request, "approved": True}])
        forked = await rt.drive(new)
        assert forked["status"] == "waiting"
        assert forked["turns"][0]["steps"][0]["actions"][0]["output"] == "1"
        assert (await rt.drive(sid))["status"] == "parked"  # the original still waits
        await rt.respond(sid, [{"requestId": request, "approved": False}])
        view = await rt.drive(sid)
        assert view["turns"][0]["steps"][0]["actions"][0]["status"] == "rejected"

    asyncio.run(go())


EXAMPLE = Path(__file__).resolve().parents[2] / ".workflow-data.example"


def test_a_session_recorded_before_forks_forks_at_its_turn_boundaries_leaving_it_untouched(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    shutil.copytree(EXAMPLE, data)
    files = {p: p.read_bytes() for p in data.rglob("*") if p.is_file()}

    async def go() -> None:
        rt = Runtime(data_dir=data)
        [sid] = [row["id"] for row in rt.sessions()]
        token = rt.events(sid)[1]["continuationToken"]
        new = (await rt.fork(sid, "2"))["sessionId"]
        view = await chat(rt, new, "hello again")
        assert [t["input"] for t in view["turns"]] == ["hello", "what time is it?", "hello again"]
        events = rt.events(new)
        assert {e["sessionId"] for e in events} == {new}  # older events stored the original's
        waits = [e["continuationToken"] for e in events if e["type"] == "session.waiting"]
        assert waits and token not in waits
        assert rt.lineage(sid)["forks"] == [new]
        rt.close()

    asyncio.run(go())
    for path, content in files.items():  # nothing of the original was written
        if path.name == "FORMAT":  # the store got its id and format 3 (files unchanged)
            now = json.loads(path.read_bytes())
            assert now["id"] and {**now, "id": None} == {
                **json.loads(content),
                "id": None,
                "version": 3,
            }
        else:
            assert path.read_bytes() == content, path


def test_a_fork_another_opener_makes_or_removes_shows_in_a_running_runtimes_lineage(
    open_world: WorldOpener, make_agent: AgentFactory
) -> None:
    agent = make_agent(script=[reply("one")] * 4)

    async def go() -> None:
        here = Runtime(agent_dir=agent, world=open_world())
        sid = await here.create_session()
        await chat(here, sid, "hi")
        assert here.lineage(sid)["forks"] == []
        there = Runtime(agent_dir=agent, world=open_world())  # as another process would
        new = (await there.fork(sid))["sessionId"]
        assert here.lineage(sid)["forks"] == [new]  # nothing of the first answer kept
        assert here.lineage(new)["forkedFrom"]["session"] == sid  # type: ignore[index]
        with there.world.acquire(new):  # what `eve gc` does
            assert there.world.remove_family(new)
        assert here.lineage(sid)["forks"] == []
        here.close()
        there.close()

    asyncio.run(go())


class _CountingWorld(MemoryWorld):
    """Counts the family heads it reads (one a family for `heads`)."""

    head_reads = 0

    def read_head(self, root: str) -> dict[str, Any] | None:
        self.head_reads += 1
        return super().read_head(root)

    def heads(
        self, *, roots: Sequence[str] | None = None, inbox: bool = True, runnable: bool = False
    ) -> list[FamilyHead]:
        found = super().heads(roots=roots, inbox=inbox, runnable=runnable)
        self.head_reads += len(found)
        return found


def test_a_sessions_lineage_reads_the_heads_of_its_own_forks_not_every_head(
    make_agent: AgentFactory,
) -> None:
    agent = make_agent(script=[reply("one")] * 4)
    world = _CountingWorld()

    async def go() -> None:
        rt = Runtime(agent_dir=agent, world=world)
        sid = await rt.create_session()
        await chat(rt, sid, "hi")
        others = [await rt.create_session() for _ in range(30)]
        forks = sorted([(await rt.fork(sid))["sessionId"] for _ in range(2)])
        # Ids that are no fork of it: another's session, one a crash left before its fork.
        world.stream_append(forks_stream(sid), {"session": others[0]})
        world.stream_append(forks_stream(sid), {"session": "s_never"})
        fresh = Runtime(agent_dir=agent, world=world)  # no meta kept
        world.head_reads = 0
        assert fresh.lineage(sid) == {"forkedFrom": None, "forks": forks}
        assert world.head_reads == 1 + 2 + 1  # its own, its forks', the other session's
        rt.close()
        fresh.close()

    asyncio.run(go())
