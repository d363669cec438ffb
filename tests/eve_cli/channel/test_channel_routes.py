"""Every route of SPEC §10 and every error code, against a real server and runtime."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.eve_cli.channel.channel_support import (
    WAIT,
    ServerThread,
    call,
    of_type,
    output_of,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)

API = "/eve/v1"

GATED_TOOLS = """
from eve_cli import always, tool

@tool(approval=always())
def gate(reason: str) -> str:
    \"\"\"Needs the user's approval.\"\"\"
    return "passed " + reason
"""


@pytest.fixture
def server(serve: Callable[..., ServerThread], tmp_path: Path) -> ServerThread:
    script = write_script(
        tmp_path / "script.json",
        [reply("hello there"), call("gate", reason="r1"), reply("after gate"), reply("third")],
    )
    return serve(write_agent(tmp_path / "agent", script, GATED_TOOLS))


JSON = {"content-type": "application/json"}


def post(server: ServerThread, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    if body is not None:
        kw["json"] = body
    kw.setdefault("headers", JSON)  # writes need a JSON content type, even an empty one
    return httpx.post(server.url + API + path, timeout=WAIT, **kw)


def get(server: ServerThread, path: str, **kw: Any) -> httpx.Response:
    return httpx.get(server.url + API + path, timeout=WAIT, **kw)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "message"}
    assert error["message"] and "\n" not in error["message"]
    if code is not None:
        assert error["code"] == code
    return str(error["message"])


def test_health_and_info(server: ServerThread) -> None:
    assert get(server, "/health").json() == {"ok": True}
    info = get(server, "/info").json()
    assert info["name"] == "eve" and info["api"] == "eve/v1"
    assert info["turnPolicies"] == ["steer", "queue"]


def test_create_get_list_and_first_turn(server: ServerThread) -> None:
    created = post(server, "/session", {"message": "hi"})
    assert created.status_code == 202
    sid = created.json()["sessionId"]
    assert created.json()["disposition"] == "started"
    events = read_events(server.url, sid, settled())
    types = [e["type"] for e in events]
    assert types.count("turn.completed") == 1 and types[-1] == "session.waiting"
    texts = [e.get("text") for e in events if e["type"] == "message.completed"]
    assert texts == ["hello there"]
    view = get(server, f"/session/{sid}").json()
    assert view["id"] == sid and view["status"] == "waiting"
    listed = get(server, "/sessions").json()["sessions"]
    assert [s["id"] for s in listed] == [sid]


def test_create_without_body_then_deliver(server: ServerThread) -> None:
    sid = post(server, "/session").json()["sessionId"]
    assert get(server, f"/session/{sid}").json()["status"] == "waiting"
    delivered = post(server, f"/session/{sid}", {"message": "hi", "turnPolicy": "queue"})
    assert delivered.status_code == 202
    assert delivered.json()["disposition"] in ("started", "queued")
    read_events(server.url, sid, of_type("turn.completed"))


def test_repeated_operation_id_returns_the_same_session_and_delivers_once(
    server: ServerThread,
) -> None:
    first = post(server, "/session", {"message": "hi", "operationId": "op-1"}).json()
    again = post(server, "/session", {"message": "hi", "operationId": "op-1"})
    assert again.status_code == 202
    assert again.json()["sessionId"] == first["sessionId"]
    other = post(server, "/session", {"operationId": "op-2"}).json()
    assert other["sessionId"] != first["sessionId"]
    events = read_events(server.url, first["sessionId"], settled())
    assert [e["type"] for e in events].count("message.received") == 1


def test_approval_answered_over_http(server: ServerThread) -> None:
    sid = post(server, "/session", {"message": "one"}).json()["sessionId"]
    read_events(server.url, sid, settled())
    post(server, f"/session/{sid}", {"message": "two"})
    waiting = read_events(server.url, sid, of_type("turn.waiting"))
    request = next(e for e in waiting if e["type"] == "input.requested")
    view = get(server, f"/session/{sid}").json()
    assert view["status"] == "parked"
    pending = [p["requestId"] for p in view["pending"]]
    assert pending == [request["requestId"]]
    # Only requests pending in this session can be answered.
    stray = post(
        server, f"/session/{sid}", {"inputResponses": [{"requestId": "nope", "approved": True}]}
    )
    assert_error(stray, 409, "conflict")
    answer = {"inputResponses": [{"requestId": pending[0], "approved": True}]}
    accepted = post(server, f"/session/{sid}", answer)
    assert accepted.status_code == 202 and accepted.json()["accepted"] == 1
    start = waiting[-1]["index"] + 1
    rest = read_events(server.url, sid, of_type("turn.completed"), start=start)
    results = [e for e in rest if e["type"] == "action.result"]
    assert results and results[0]["status"] == "completed"
    assert "passed r1" in output_of(results[0])


@pytest.mark.parametrize("action", ["cancel", "compact", "clear", "reset"])
def test_session_actions(server: ServerThread, action: str) -> None:
    sid = post(server, "/session", {"message": "hi"}).json()["sessionId"]
    read_events(server.url, sid, settled())
    done = post(server, f"/session/{sid}/{action}")
    assert done.status_code == 202, done.text
    assert done.json()["sessionId"] == sid and done.json()["action"] == action
    assert_error(post(server, f"/session/unknown-id/{action}"), 404, "not_found")


def test_bad_requests_are_400(server: ServerThread) -> None:
    sid = post(server, "/session").json()["sessionId"]
    cases: list[tuple[str, dict[str, Any]]] = [
        ("{not json", {}),
        ("[1, 2]", {}),
        ('{"message": 5}', {}),
        ('{"message": "x", "turnPolicy": "later"}', {}),
        ('{"message": "x", "inputResponses": []}', {}),
        ("{}", {}),
        ('{"inputResponses": [{"approved": true}]}', {}),
        ('{"inputResponses": [{"requestId": "r", "approved": "yes"}]}', {}),
    ]
    for body, _ in cases:
        response = httpx.post(
            f"{server.url}{API}/session/{sid}", content=body, headers=JSON, timeout=WAIT
        )
        assert_error(response, 400, "bad_request")
    assert_error(post(server, "/session", {"mode": "sideways"}), 400)
    assert_error(
        httpx.post(f"{server.url}{API}/session", content="{", headers=JSON, timeout=WAIT), 400
    )


def test_stream_bad_start_index_is_400(server: ServerThread) -> None:
    sid = post(server, "/session").json()["sessionId"]
    assert_error(get(server, f"/session/{sid}/stream", params={"startIndex": "x"}), 400)


def test_malformed_ids_are_400_and_unknown_ones_404(server: ServerThread) -> None:
    for bad in ("bad%20id", "a..b", ".hidden", "%2E%2E%2Fetc", "x" * 65):
        assert_error(get(server, f"/session/{bad}"), 400, "bad_request")
        assert_error(post(server, f"/session/{bad}", {"message": "x"}), 400)
        assert_error(get(server, f"/session/{bad}/stream"), 400)
    assert_error(get(server, "/session/..%2F..%2Fetc%2Fpasswd"), 400)
    assert_error(get(server, "/session/well-formed-but-unknown"), 404, "not_found")
    assert_error(post(server, "/session/well-formed-but-unknown", {"message": "x"}), 404)
    assert_error(get(server, "/session/well-formed-but-unknown/stream"), 404)


def test_unknown_route_and_method_are_json(server: ServerThread) -> None:
    assert_error(get(server, "/nothing"), 404, "not_found")
    assert_error(httpx.delete(f"{server.url}{API}/sessions", timeout=WAIT), 405)


def test_too_large_body_is_413(serve: Callable[..., ServerThread]) -> None:
    server = serve(max_body=1000)
    sid = post(server, "/session").json()["sessionId"]
    big = {"message": "x" * 2000}
    assert_error(post(server, f"/session/{sid}", big), 413, "payload_too_large")

    def chunks() -> Any:  # no content-length: the limit applies while reading
        yield b'{"message": "'
        for _ in range(10):
            yield b"y" * 200
        yield b'"}'

    response = httpx.post(
        f"{server.url}{API}/session/{sid}", content=chunks(), headers=JSON, timeout=WAIT
    )
    assert_error(response, 413)
    assert post(server, f"/session/{sid}", {"message": "small"}).status_code == 202


def test_bearer_token(serve: Callable[..., ServerThread]) -> None:
    server = serve(token="s3cret-token")
    assert get(server, "/health").status_code == 200  # liveness needs no token
    assert_error(get(server, "/sessions"), 401, "unauthorized")
    assert_error(get(server, "/sessions", headers={"authorization": "Bearer wrong"}), 401)
    assert_error(get(server, "/sessions", headers={"authorization": "Basic s3cret-token"}), 401)
    assert_error(post(server, "/session", {}), 401)
    good = {"authorization": "Bearer s3cret-token"}
    assert get(server, "/sessions", headers=good).status_code == 200
    assert post(server, "/session", {}, headers=good).status_code == 202


def test_damaged_data_is_a_json_error_and_one_log_line(server: ServerThread) -> None:
    sid = post(server, "/session", {"message": "hi"}).json()["sessionId"]
    read_events(server.url, sid, settled())
    streams = Path(os.environ["EVE_DATA_DIR"]) / "streams"
    data = streams / f"events.{sid}.msgpack"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 3 : len(raw) // 3 + 16] = b"\xc1" * 16  # garbage inside a stored event
    data.write_bytes(bytes(raw))
    for response in (get(server, "/sessions"), get(server, f"/session/{sid}")):
        message = assert_error(response, 500, "damaged")
        assert "eve doctor" in message
        assert "Traceback" not in message
    assert server.logs and all("\n" not in line for line in server.logs)
    assert get(server, "/health").json() == {"ok": True}


def test_ended_task_session_rejects_deliveries_and_its_stream_ends(server: ServerThread) -> None:
    created = post(server, "/session", {"message": "do it once", "mode": "task"})
    sid = created.json()["sessionId"]
    events = read_events(server.url, sid, of_type("session.completed", "session.failed"))
    assert events[-1]["type"] == "session.completed"
    assert get(server, f"/session/{sid}").json()["status"] == "completed"
    refused = post(server, f"/session/{sid}", {"message": "more?"})
    assert assert_error(refused, 409, "rejected")
    body = refused.json()
    assert body["disposition"] == "rejected" and "completed" in body["reason"]
    # Nothing will be appended any more: the stream replays and ends instead of hanging.
    replayed = httpx.get(f"{server.url}{API}/session/{sid}/stream", timeout=WAIT)
    lines = [line for line in replayed.text.splitlines() if line.strip()]
    assert len(lines) == len(events)


def test_a_session_is_read_a_page_of_turns_at_a_time(
    serve: Callable[..., ServerThread], tmp_path: Path
) -> None:
    """GET /session/{id}: the latest 20 turns, their count and the query for the page before;
    ?fromTurn and ?turns ask for any page (RemoteRuntime.session the same)."""
    import asyncio

    from eve_cli.channel.client import RemoteRuntime
    from eve_cli.runtime import Runtime

    script = write_script(tmp_path / "script.json", [reply(f"r{n}") for n in range(23)])
    agent = write_agent(tmp_path / "agent", script)
    rt = Runtime(data_dir=Path(os.environ["EVE_DATA_DIR"]), agent_dir=agent)

    async def build() -> str:
        sid = await rt.create_session()
        for n in range(23):
            await rt.deliver(sid, f"m{n}")
            await rt.drive(sid, view=False)
        return sid

    sid = asyncio.run(build())
    rt.close()
    server = serve(agent)
    latest = get(server, f"/session/{sid}").json()
    shape = (latest["turnCount"], latest["turnsFrom"], latest["earlier"])
    assert shape == (23, 4, "?fromTurn=1&turns=3")
    assert [t["input"] for t in latest["turns"]] == [f"m{n}" for n in range(3, 23)]
    assert latest["turns"][-1]["steps"][0]["text"] == "r22"
    earlier = get(server, f"/session/{sid}{latest['earlier']}").json()
    assert [t["number"] for t in earlier["turns"]] == [1, 2, 3] and earlier["earlier"] is None
    assert earlier["turns"][0]["steps"][0]["text"] == "r0"
    last = get(server, f"/session/{sid}?fromTurn=22").json()["turns"]
    assert [t["number"] for t in last] == [22, 23]
    assert len(get(server, f"/session/{sid}?turns=all").json()["turns"]) == 23
    assert get(server, f"/session/{sid}?turns=0").json()["turns"] == []
    for bad in ("fromTurn=0", "fromTurn=x", "turns=-1", "turns=some"):
        assert_error(get(server, f"/session/{sid}?{bad}"), 400)
    remote = RemoteRuntime(server.url)
    try:
        assert remote.session(sid)["turns"] == latest["turns"]
        assert len(remote.session(sid, None)["turns"]) == 23
        assert [t["number"] for t in remote.session(sid, 2, 5)["turns"]] == [5, 6]
    finally:
        remote.close()
