"""`POST /eve/v1/session/{id}/fork` and the lineage `GET /eve/v1/session/{id}` shows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from eve_cli.channel.client import RemoteRuntime
from tests.eve_cli.channel.channel_support import (
    ServerThread,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)
from tests.eve_cli.channel.test_channel_routes import assert_error, get, post


def test_a_fork_over_http_is_a_session_of_its_own_with_its_lineage_both_ways(
    serve: Callable[..., ServerThread], tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.json", [reply("first"), reply("second"), reply("third")])
    server = serve(write_agent(tmp_path / "agent", script))
    # Made empty, then sent its message: it waited for it first (checkpoint 0). A session
    # created with its message starts its first turn at once and has no checkpoint 0.
    sid = post(server, "/session", {}).json()["sessionId"]
    post(server, f"/session/{sid}", {"message": "one"})
    read_events(server.url, sid, settled())
    forked = post(server, f"/session/{sid}/fork", {"at": "0"})
    assert forked.status_code == 201, forked.text
    new = forked.json()["sessionId"]
    assert forked.json() == {"sessionId": new, "forkedFrom": sid, "checkpoint": "0"}
    view = get(server, f"/session/{new}").json()
    assert view["forkedFrom"]["session"] == sid and view["forkedFrom"]["checkpoint"] == "0"
    assert view["turns"] == [] and view["forks"] == []
    assert get(server, f"/session/{sid}").json()["forks"] == [new]
    listed = {s["id"]: s for s in get(server, "/sessions").json()["sessions"]}
    assert listed[new]["forkedFrom"]["session"] == sid and listed[sid]["forks"] == [new]
    # The fork takes its own messages; forked before any model call, it asks for entry 0.
    post(server, f"/session/{new}", {"message": "again"})
    events = read_events(server.url, new, settled())
    assert [e["text"] for e in events if e["type"] == "message.completed"] == ["first"]
    assert len(get(server, f"/session/{sid}").json()["turns"]) == 1
    # The client does the same (what `eve chat --url` calls).
    remote = RemoteRuntime(server.url)
    try:
        out = asyncio.run(remote.fork(sid))
        assert out["forkedFrom"] == sid and remote.lineage(out["sessionId"])["forkedFrom"]
    finally:
        remote.close()
    assert "no checkpoint 9" in assert_error(post(server, f"/session/{sid}/fork", {"at": "9"}), 409)
    assert "TURN or TURN.STEP" in assert_error(
        post(server, f"/session/{sid}/fork", {"at": "x"}), 400
    )
    assert_error(post(server, "/session/s_nosuch/fork", {}), 404, "not_found")
