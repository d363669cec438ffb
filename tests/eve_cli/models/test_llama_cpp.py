"""A real server nobody here wrote: llama.cpp's, as the llama-cpp-python package serves it
(OpenAI-compatible), over a tiny model written at test time. Its grammar enforces the JSON
schema of a structured result; it knows only the older ``json_object`` form of
``response_format`` (a ``json_schema`` request is refused), and its stream carries no usage.

CI installs ``llama-cpp-python[server]`` and ``gguf`` (.ci/run); elsewhere the test is
skipped without them, never under CI."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (``…/v1``) of a llama.cpp server over the tiny model."""
    try:
        import gguf  # noqa: F401
        import llama_cpp.server  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("needs llama-cpp-python[server] and gguf (.ci/run installs them)")
    from tests.eve_cli.models.tiny_gguf import write

    folder = tmp_path_factory.mktemp("llama")
    model = write(folder / "tiny.gguf")
    port = _free_port()
    log = (folder / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "4096", "--seed", "7"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((folder / "server.log").read_text()[-2000:])
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_the_server_refuses_the_json_schema_form(llama_server: str) -> None:
    """What the fallback below relies on: a ``json_schema`` response_format is refused."""
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}},
    }
    answer = httpx.post(llama_server + "/chat/completions", json=body, timeout=30)
    assert answer.status_code >= 400
    assert "json_object" in answer.text


def test_a_structured_result_from_llama_cpp(
    llama_server: str, make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", llama_server)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    agent = make_agent(
        agent_args=f"model='openai:tiny', output_schema={SCHEMA!r}, "
        "settings={'max_tokens': 300, 'temperature': 0.0}"
    )

    async def main() -> None:
        rt = Runtime(agent_dir=agent, data_dir=tmp_path / "data")
        sid = await rt.create_session()
        for text in ("answer", "again"):
            await rt.deliver(sid, text)
            assert (await rt.drive(sid))["status"] == "waiting", rt.events(sid)[-3:]
        events = rt.events(sid)
        results = [e["value"] for e in events if e["type"] == "result"]
        assert len(results) == 2, [e for e in events if "error" in e]
        for value in results:
            assert set(value) == {"ok", "n"}
            assert isinstance(value["ok"], bool) and isinstance(value["n"], int)
        replies = [e["text"] for e in events if e["type"] == "message.completed"]
        assert [json.loads(r) for r in replies if r.strip()] == results
        usage = [e.get("usage") or {} for e in events if e["type"] == "step.completed"]
        # The stream reports none: estimated, never missing.
        assert all(u.get("inputTokens", 0) > 0 and u.get("outputTokens", 0) > 0 for u in usage)

    asyncio.run(main())
