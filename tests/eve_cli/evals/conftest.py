"""Fixtures of the eval tests: a scripted provider server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.eve_cli.models.scriptserver import ScriptServer


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptServer]:
    """A started server both providers are pointed at (keys in the environment only)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    instance = ScriptServer()
    instance.start()
    monkeypatch.setenv("OPENAI_BASE_URL", instance.url + "/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", instance.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-eval-openai-0f1e2d3c")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-eval-4b5a6978")
    monkeypatch.setenv("EVE_MODEL_RETRY_BASE_DELAY", "0.01")
    try:
        yield instance
    finally:
        instance.stop()
