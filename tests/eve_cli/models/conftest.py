"""Fixtures of the provider tests: a scripted server, a fast retry policy, no proxies."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eve_cli.models._http import RetryPolicy
from tests.eve_cli.models.scriptserver import ScriptServer, Sleeps


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    """A started :class:`ScriptServer`, stopped after the test."""
    instance = ScriptServer()
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx honours proxy variables; requests to the local test server must go direct.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def policy(sleeps: Sleeps) -> RetryPolicy:
    """Tiny retry delays (recorded, not slept) and stall timeouts of about a second."""
    return RetryPolicy(
        max_retries=3,
        base_delay=0.01,
        max_delay=0.05,
        first_chunk_timeout=1.0,
        chunk_timeout=0.6,
        sleep=sleeps,
    )
