"""Secrets end to end: `eve chat` processes with API keys in the environment and in .env files
talk to a real (local) OpenAI-compatible server; afterwards no key is anywhere in the data
directory or in any event, and every token eve generated carries at least 128 random bits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.eve_cli.models.scriptserver import Reply, ScriptServer, sse

OPENAI_KEY = "sk-e2e-OPENAI-8c1f0a77d2b94e3f"
ANTHROPIC_KEY = "sk-ant-e2e-ANTHROPIC-51d0c9e2a4"
ENV_FILE_KEY = "sk-e2e-DOTENV-3a9b7c1e5d"


def _text_turn(text: str) -> Reply:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    stop = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return Reply(chunks=[sse(chunk), sse(stop), sse("[DONE]")])


def test_no_key_on_disk_or_in_events_and_tokens_are_long(isolated: Path) -> None:
    server = ScriptServer()
    server.start()
    try:
        server.add(*[_text_turn(f"answer {i}") for i in range(4)])
        (isolated / ".env.local").write_text(f"OPENAI_API_KEY={ENV_FILE_KEY}\n")
        env = {**os.environ, "OPENAI_BASE_URL": server.url + "/v1",
               "ANTHROPIC_API_KEY": ANTHROPIC_KEY}  # fmt: skip
        runs = [
            ({**env, "OPENAI_API_KEY": OPENAI_KEY}, OPENAI_KEY),
            (env, ENV_FILE_KEY),  # the key comes from .env.local this time
        ]
        for run_env, key in runs:
            proc = subprocess.run(
                [sys.executable, "-m", "eve_cli", "chat", "-m", "openai:gpt-test", "--json"],
                input="one\ntwo\n", capture_output=True, text=True, env=run_env, timeout=120,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            sent = [r.headers.get("authorization") for r in server.requests[-2:]]
            assert sent == [f"Bearer {key}"] * 2  # the key was really used
            for secret in (OPENAI_KEY, ANTHROPIC_KEY, ENV_FILE_KEY):
                assert secret not in proc.stdout and secret not in proc.stderr
    finally:
        server.stop()

    data = Path(os.environ["EVE_DATA_DIR"])
    files = [p for p in data.rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        blob = path.read_bytes()
        for secret in (OPENAI_KEY, ANTHROPIC_KEY, ENV_FILE_KEY):
            assert secret.encode() not in blob, path

    sessions = sorted(p.name for p in (data / "runs").iterdir())
    assert len(sessions) == 2
    for sid in sessions:
        proc = subprocess.run(
            [sys.executable, "-m", "eve_cli", "inspect", sid, "--events", "--json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "sk-" not in proc.stdout
        tokens = re.findall(r'"continuationToken":\s*"([^"]+)"', proc.stdout)
        assert tokens, "no continuation token in the events"
        for token in tokens:
            assert _bits(token) >= 128, token
    for hook in (data / "hooks").iterdir():
        assert _bits(hook.name) >= 128, hook.name


def _bits(token: str) -> float:
    """Random bits a generated token can carry, from its alphabet and length."""
    if re.fullmatch(r"[0-9a-f]+", token):
        return 4.0 * len(token)
    if re.fullmatch(r"[A-Za-z0-9_-]+", token):
        return 6.0 * len(token)
    return 0.0  # an alphabet eve does not generate: fail


QUERY_KEY = "qk-e2e-QUERYSTRING-6f2d8a1c9b"
USER_SECRET = "pw-e2e-USERINFO-0b7e4c2a91"


def _all_bytes(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in root.rglob("*") if p.is_file()]


def _pieces(secret: str, size: int = 10) -> list[bytes]:
    return [secret[i : i + size].encode() for i in range(len(secret) - size + 1)]


def test_keys_in_the_base_url_or_split_in_an_error_body_never_reach_disk(isolated: Path) -> None:
    # The server echoes what it was sent (the request line with its query, the bearer key
    # wrapped over two lines) in its error answers, as some proxies and gateways do.
    server = ScriptServer()
    server.start()
    try:
        split = OPENAI_KEY[:12] + "\n" + OPENAI_KEY[12:]
        echo = {"error": {"message": f"denied POST /v1/chat/completions?api-key={QUERY_KEY} "
                                     f"for key\n{split}\n(escaped: {OPENAI_KEY[:9]}\\n"
                                     f"{OPENAI_KEY[9:]})", "code": "denied"}}  # fmt: skip
        body = json.dumps(echo).encode()
        server.add(*[Reply(status=403, body=body, content_type="application/json")] * 2)
        host = server.url.removeprefix("http://")
        base = f"http://eve:{USER_SECRET}@{host}/v1?api-key={QUERY_KEY}"
        env = {**os.environ, "OPENAI_API_KEY": OPENAI_KEY, "OPENAI_BASE_URL": base}
        proc = subprocess.run(
            [sys.executable, "-m", "eve_cli", "chat", "-m", "openai:gpt-test", "--json"],
            input="one\n", capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert server.requests, proc.stderr
        assert server.requests[0].path == f"/v1/chat/completions?api-key={QUERY_KEY}"
    finally:
        server.stop()
    assert "denied" in proc.stdout + proc.stderr  # the error itself is reported
    data = Path(os.environ["EVE_DATA_DIR"])
    stored = _all_bytes(data)
    assert any(b"denied" in blob for _, blob in stored)  # and recorded
    for secret in (OPENAI_KEY, QUERY_KEY, USER_SECRET):
        for piece in _pieces(secret):
            for path, blob in stored:
                assert piece not in blob, (secret, piece, path)
            assert piece.decode() not in proc.stdout + proc.stderr
