"""Principals on a real `eve start`: static tokens from a tokens file and JWTs from an OIDC
issuer on 127.0.0.1, chosen by `eve start` options; bad settings are one line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from eve_cli.auth import digest
from tests.eve_cli.auth.idp import Issuer
from tests.eve_cli.channel.channel_support import WAIT, EveProcess

API = "/eve/v1"


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as running:
        yield running


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "content-type": "application/json"}


def test_eve_start_with_a_tokens_file_and_an_issuer(
    eve_process: Callable[..., EveProcess], issuer: Issuer, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# who may call\n{digest('tok-ci')} ci scopes=read\n")
    server = eve_process(
        "start", "--port", "0", "--auth-tokens", str(tokens),
        "--auth-issuer", issuer.url, "--auth-audience", "eve",
    )  # fmt: skip
    server.stderr_until(r"auth: 1 static token\(s\), JWT")
    with httpx.Client(base_url=server.url + API, timeout=WAIT) as client:
        assert client.get("/sessions", headers=bearer("tok-ci")).status_code == 200
        refused = client.post("/session", headers=bearer("tok-ci"), json={})
        assert refused.status_code == 403  # `ci` may read, not send
        jwt = issuer.mint("alice", scope="read send")
        assert client.post("/session", headers=bearer(jwt), json={}).status_code == 202
        assert client.get("/sessions").status_code == 401
        assert client.get("/sessions", headers=bearer("tok-other")).status_code == 401
        bad_aud = client.get("/sessions", headers=bearer(issuer.mint("alice", aud="x")))
        assert bad_aud.status_code == 403
    server.stderr_until(r"auth: GET /eve/v1/sessions from 127\.0\.0\.1: JWT audience")
    assert not any("tok-" in line or jwt in line for line in server.stderr_lines)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--auth-tokens", "{tmp}/missing"], "cannot read the tokens file"),
        (["--auth-tokens", "{tmp}/plain"], "plain:1: expected 'sha256:"),
        (["--auth-jwks", "{tmp}/missing.json"], "cannot read the JWKS"),
        (["--auth-client-id", "web"], "needs an issuer"),
        (["--host", "0.0.0.0"], "not a loopback address"),
    ],
)
def test_bad_auth_settings_are_one_line(args: list[str], said: str, tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("tok-in-the-clear alice\n")
    given = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", "start", "--port", "0", *given],
        capture_output=True, text=True, timeout=WAIT,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
    assert "tok-in-the-clear" not in done.stderr


def test_eve_token_makes_a_token_and_its_digest() -> None:
    made = subprocess.run([sys.executable, "-m", "eve_cli", "token"], capture_output=True,
                          text=True, timeout=WAIT, check=True).stdout.split()  # fmt: skip
    token, line = made[1], made[3]
    assert line == digest(token)
    again = subprocess.run([sys.executable, "-m", "eve_cli", "token", "--stdin"], input=token,
                           capture_output=True, text=True, timeout=WAIT, check=True)  # fmt: skip
    assert again.stdout.strip() == digest(token)


def test_ownership_is_kept_with_the_session_across_kill_9(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    import signal

    tokens = tmp_path / "tokens"
    tokens.write_text(
        f"{digest('tok-alice')} alice scopes=read,send\n{digest('tok-bob')} bob scopes=read,send\n"
    )
    args = ("start", "--port", "0", "--auth-tokens", str(tokens))
    first = eve_process(*args)
    with httpx.Client(base_url=first.url + API, timeout=WAIT) as client:
        sid = client.post("/session", headers=bearer("tok-alice"), json={}).json()["sessionId"]
    first.signal(signal.SIGKILL)
    first.wait()
    second = eve_process(*args)
    with httpx.Client(base_url=second.url + API, timeout=WAIT) as client:
        assert client.get(f"/session/{sid}", headers=bearer("tok-alice")).status_code == 200
        assert client.get(f"/session/{sid}", headers=bearer("tok-bob")).status_code == 404
        assert client.get("/sessions", headers=bearer("tok-bob")).json()["sessions"] == []


WHOAMI = """
from pathlib import Path
from eve_cli import ToolContext, tool

@tool
def whoami(ctx: ToolContext) -> str:
    \"\"\"Who is asking (written down: counts real runs).\"\"\"
    with open(Path(__file__).parent.parent / "runs.txt", "a") as f:
        f.write(f"{ctx.principal} {ctx.initiator}\\n")
    return "you are " + str((ctx.principal or {}).get("subject"))
"""


@pytest.mark.slow
def test_principals_survive_kill_9_and_a_postgresql_takeover(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    import signal

    from tests.eve_cli.channel.channel_support import read_events, write_agent, write_script
    from tests.pg_support import fresh_schema

    tokens = tmp_path / "tokens"
    tokens.write_text(f"{digest('tok-alice')} alice tenant=acme scopes=read,send\n")
    whoami = {"name": "whoami", "arguments": {}}
    script = write_script(tmp_path / "s.json", [
        {"text": "w", "tool_calls": [whoami], "delay": 4.0}, {"text": "done", "tool_calls": []},
    ])  # fmt: skip
    agent = write_agent(tmp_path / "agent", script, WHOAMI)
    alice = bearer("tok-alice")
    with fresh_schema(lease="1.5") as url:
        args = ("start", "--port", "0", "--agent", str(agent), "--world", url,
                "--auth-tokens", str(tokens))  # fmt: skip
        first = eve_process(*args)
        sid = httpx.post(f"{first.url}{API}/session", json={"message": "who am i?"},
                         headers=alice, timeout=WAIT).json()["sessionId"]  # fmt: skip
        read_events(first.url, sid, lambda e: e["type"] == "message.appended", headers=alice)
        second = eve_process(*args)
        first.signal(signal.SIGKILL)
        events = read_events(second.url, sid, lambda e: e["type"] == "turn.completed",
                             headers=alice)  # fmt: skip
        second.stderr_until(f"took over session {sid}")
    who = {"subject": "alice", "tenant": "acme"}
    assert [e["by"] for e in events if e["type"] == "message.received"] == [who]
    runs = (agent / "runs.txt").read_text().splitlines()
    assert runs == [f"{who} {who}"]  # run once, after the takeover, knowing who asked
    results = [e["output"] for e in events if e["type"] == "action.result"]
    assert results == ["you are alice"]


AUTH_PY = """
from eve_cli.auth import Principal, Refused, define_auth

def verify(request):
    # A proxy in front says who the user is; this one trusts only its own shared header.
    if request.headers.get("x-proxy-secret") != "proxy-says":
        return None
    user = request.headers.get("x-user", "")
    if user == "mallory":
        raise Refused("mallory is suspended", 403)
    return Principal(user, scopes={"read", "send"}) if user else None

auth = define_auth(verify=verify)
"""


def test_a_custom_verifier_in_the_agent_folder(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    from tests.eve_cli.channel.channel_support import reply, write_agent, write_script

    agent = write_agent(tmp_path / "agent", write_script(tmp_path / "s.json", [reply("hi")]))
    (agent / "auth.py").write_text(AUTH_PY)
    server = eve_process("start", "--port", "0", "--agent", str(agent))
    server.stderr_until(r"auth: a custom verifier")

    def as_(user: str) -> dict[str, str]:
        return {"x-proxy-secret": "proxy-says", "x-user": user,
                "content-type": "application/json"}  # fmt: skip

    with httpx.Client(base_url=server.url + API, timeout=WAIT) as client:
        sid = client.post("/session", headers=as_("dora"), json={}).json()["sessionId"]
        assert client.get(f"/session/{sid}", headers=as_("dora")).status_code == 200
        assert client.get(f"/session/{sid}", headers=as_("erik")).status_code == 404
        assert client.get("/sessions", headers={"x-user": "dora"}).status_code == 401
        suspended = client.get("/sessions", headers=as_("mallory"))
        assert suspended.status_code == 403
        assert suspended.json()["error"]["message"] == "mallory is suspended"


def test_a_broken_auth_py_is_one_line(tmp_path: Path) -> None:
    from tests.eve_cli.channel.channel_support import reply, write_agent, write_script

    agent = write_agent(tmp_path / "agent", write_script(tmp_path / "s.json", [reply("hi")]))
    (agent / "auth.py").write_text("from eve_cli.auth import define_auth\nauth = define_auth(\n")
    done = subprocess.run(
        [sys.executable, "-m", "eve_cli", "start", "--port", "0", "--agent", str(agent)],
        capture_output=True, text=True, timeout=WAIT,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "auth.py:" in lines[0] and "syntax error" in lines[0]
