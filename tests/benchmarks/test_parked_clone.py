"""The parked-sessions benchmark builds its store by cloning: the clones must be real sessions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from benchmarks import parked_sessions
from eve_cli.execution._view import SessionView
from eve_cli.runtime import Runtime
from world import verify


def test_cloned_sessions_verify_list_and_wake(tmp_path: Path) -> None:
    agent, data, clones = parked_sessions.build(tmp_path.resolve(), 7)
    assert len(clones) == 7 - parked_sessions.SEEDS
    bad = [f for f in verify(data) if not f.ok]
    assert bad == []
    rt = Runtime(data_dir=data, agent_dir=agent)
    rows = {r["id"]: r for r in rt.sessions()}
    assert len(rows) == 7
    assert {r["status"] for r in rows.values()} == {"parked"}
    sid = clones[-1]
    [request] = rt.session(sid)["pending"]

    async def wake() -> SessionView:
        await rt.respond(sid, [{"requestId": request["requestId"], "approved": True}])
        return await rt.drive(sid)

    view = asyncio.run(wake())
    rt.close()
    assert view["status"] == "waiting"
    assert view["turns"][-1]["steps"][0]["actions"][0]["output"] == "deployed prod"
    others = Runtime(data_dir=data, agent_dir=agent)
    statuses = sorted(r["status"] for r in others.sessions())
    others.close()
    assert statuses == ["parked"] * 6 + ["waiting"]
