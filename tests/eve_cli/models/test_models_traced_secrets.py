"""No secret in any span: a traced turn on the OpenAI provider (a real local server, a real key
in the environment), message content recorded too, exported to a real OTLP receiver; the key
is in no byte the exporter sent, while the model's name and usage are."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eve_cli import _tracing
from eve_cli.runtime import Runtime
from tests.eve_cli.models.scriptserver import Reply, ScriptServer, sse
from tests.otlp_receiver import Receiver, receiver

__all__ = ["receiver"]

KEY = "sk-traced-SECRET-5e1b9c0d7a"


def test_no_key_in_any_exported_span(
    receiver: Receiver, server: ScriptServer, monkeypatch: pytest.MonkeyPatch, isolated: Path
) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "hi there"}, "finish_reason": None}]}
    stop = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 3}}
    server.add(Reply(chunks=[sse(chunk), sse(stop), sse(usage), sse("[DONE]")]))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    monkeypatch.setenv(_tracing.ENV, "1")
    monkeypatch.setenv(_tracing.CONTENT_ENV, "true")

    async def main() -> None:
        rt = Runtime(model="openai:gpt-test")
        try:
            sid = await rt.create_session()
            await rt.deliver(sid, "hello")
            view = await rt.drive(sid)
            assert view["turns"][0]["status"] == "completed", view
        finally:
            rt.close()

    asyncio.run(main())
    _tracing.shutdown()
    spans = receiver.wait_for(lambda s: any(x.name.startswith("invoke_agent") for x in s))
    assert server.requests[-1].headers.get("authorization") == f"Bearer {KEY}"  # it was used
    [chat] = [s for s in spans if s.name == "chat gpt-test"]
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 11
    assert "hello" in chat.attributes["gen_ai.input.messages"]
    assert receiver.bodies and all(KEY.encode() not in body for body in receiver.bodies)
    assert all(KEY not in repr(s.attributes) for s in spans)
