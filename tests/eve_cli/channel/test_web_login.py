"""The browser view logs in with the server's OpenID Connect issuer (authorization code with
PKCE, a real issuer on 127.0.0.1, Debian's Chromium): each user sees only their sessions, and
the token is kept in the tab's sessionStorage, never in localStorage or the URL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from eve_cli.auth import define_auth
from tests.eve_cli.auth.idp import Issuer
from tests.eve_cli.channel.browser_support import Tab, expect
from tests.eve_cli.channel.channel_support import (
    WAIT,
    ServerThread,
    reply,
    write_agent,
    write_script,
)

pytestmark = pytest.mark.slow  # a browser


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as running:
        yield running


def test_two_users_log_in_with_the_issuer_and_see_only_their_sessions(
    serve: Callable[..., ServerThread], tab: Callable[..., Tab], issuer: Issuer, tmp_path: Path
) -> None:
    agent = write_agent(tmp_path / "agent", write_script(tmp_path / "s.json", [reply("hi")] * 4))
    settings = define_auth(issuer=issuer.url, audience="eve", client_id="eve-web")
    server = serve(agent, auth=settings.build(print))
    policy = httpx.get(server.url + "/", timeout=WAIT).headers["content-security-policy"]
    assert f"connect-src 'self' {issuer.url};" in policy  # the issuer, and nothing else
    made = {}
    for user in ("alice", "bob"):
        headers = {"authorization": f"Bearer {issuer.mint(user)}"}
        answer = httpx.post(f"{server.url}/eve/v1/session", json={"message": f"{user} here"},
                            headers=headers, timeout=WAIT)  # fmt: skip
        assert answer.status_code == 202, answer.text
        made[user] = answer.json()["sessionId"]

    for user, other in (("alice", "bob"), ("bob", "alice")):
        issuer.login_as = user
        t = tab()
        t.page.goto(server.url + "/")
        expect(t.page.locator("form.token")).to_be_visible()
        t.page.locator("#oidc-login").click()
        expect(t.page.locator(f'tr[data-id="{made[user]}"]')).to_be_visible()
        expect(t.page.locator(f'tr[data-id="{made[other]}"]')).to_have_count(0)
        assert "code=" not in t.page.url and "state=" not in t.page.url
        stored = json.loads(t.page.evaluate("JSON.stringify([sessionStorage, localStorage])"))
        token = stored[0]["eve.token"]
        assert token.count(".") == 2 and "eve.login" not in stored[0]
        assert token not in json.dumps(stored[1])
        t.page.goto(f"{server.url}/#/s/{made[user]}")  # who said it is shown
        expect(t.page.locator(".msg.user .who")).to_have_text(user)
        t.page.goto(f"{server.url}/#/s/{made[other]}")  # another's session: not there
        expect(t.page.get_by_text(f"{other} here")).to_have_count(0)
        expect(t.page.locator("#me")).to_contain_text(user)
        t.page.locator("#logout").click()  # the token leaves the tab
        expect(t.page.locator("form.token")).to_be_visible()
        assert t.page.evaluate("sessionStorage.getItem('eve.token')") is None
    assert not any("eyJ" in line for line in server.logs), "a token reached the log"
