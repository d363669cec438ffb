"""Every route of the app's route table, called without a token, with a principal lacking
its scope, and (on sessions) as another user: a route added without a check fails here."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from starlette.routing import Route

from eve_cli.auth import Principal, StaticTokens, Verifiers
from eve_cli.channel._access import PUBLIC, route_scope
from eve_cli.channel._auth import OPEN_PATHS
from tests.eve_cli.channel.channel_support import (
    WAIT,
    ServerThread,
    reply,
    write_agent,
    write_script,
)

TOKENS = {
    "tok-alice": Principal("alice", scopes=frozenset({"read", "send", "approve"})),
    "tok-bob": Principal("bob", scopes=frozenset({"read", "send", "approve"})),
    "tok-none": Principal("nobody"),
    "tok-admin": Principal("root", scopes=frozenset({"admin"})),
}


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "content-type": "application/json"}


@pytest.fixture
def server(serve: Callable[..., ServerThread], tmp_path: Path) -> ServerThread:
    script = write_script(tmp_path / "script.json", [reply("hello")] * 4)
    verifiers = Verifiers(StaticTokens(TOKENS))
    return serve(write_agent(tmp_path / "agent", script), auth=verifiers)


def calls(server: ServerThread, sid: str) -> list[tuple[str, str, str]]:
    """(method, concrete path, scope) of every route and method of the app."""
    assert server.channel is not None
    out = []
    for route in server.channel.app.routes:
        assert isinstance(route, Route)
        scope = route_scope(route.endpoint)
        assert scope is not None, f"route {route.path} has no scope and is not public"
        path = re.sub(r"\{sid\}|\{rest:path\}", sid, route.path).replace("{name}", "daily")
        out += [(m, path, scope) for m in sorted(route.methods or ()) if m != "HEAD"]
    return out


def test_every_route_is_guarded_or_explicitly_public(server: ServerThread) -> None:
    created = httpx.post(f"{server.url}/eve/v1/session", headers=auth("tok-alice"), json={},
                         timeout=WAIT)  # fmt: skip
    assert created.status_code == 202, created.text
    sid = created.json()["sessionId"]
    routes = calls(server, sid)
    assert len(routes) >= 20
    public = {path for _, path, scope in routes if scope == PUBLIC}
    assert public == set(OPEN_PATHS), "public routes are exactly the open paths"
    with httpx.Client(base_url=server.url, timeout=WAIT) as client:
        for method, path, scope in routes:
            if scope == PUBLIC:
                continue
            bare = client.request(method, path, headers={"content-type": "application/json"})
            assert bare.status_code == 401, (method, path, bare.text)
            assert bare.headers["www-authenticate"] == "Bearer"
            weak = client.request(method, path, headers=auth("tok-none"), content=b"{}")
            assert weak.status_code == 403, (method, path, weak.text)
            assert "scope; nobody has none" in weak.json()["error"]["message"]
            if sid in path:  # another user's session: it does not exist for them
                other = client.request(method, path, headers=auth("tok-bob"), content=b"{}")
                assert other.status_code == 404, (method, path, other.text)
    assert not any("tok-" in line for line in server.logs), "a token reached the log"
    assert any("auth: GET /eve/v1/sessions from 127.0.0.1" in line for line in server.logs)


def test_a_token_in_the_query_string_is_refused_even_a_good_one(server: ServerThread) -> None:
    for path in ("/eve/v1/sessions?access_token=tok-alice", "/eve/v1/health?token=tok-alice"):
        answer = httpx.get(server.url + path, timeout=WAIT)
        assert answer.status_code == 401
        assert "query string" in answer.json()["error"]["message"]
    assert not any("tok-alice" in line for line in server.logs)
