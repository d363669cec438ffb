"""Fixtures for the world suite: one conformance parameter per World implementation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from world import LocalWorld, MemoryWorld, World


@pytest.fixture(params=["memory", "local"])
def world(request: pytest.FixtureRequest, isolated: Path) -> Iterator[World]:
    """Every World implementation, fresh per test."""
    w: World = MemoryWorld() if request.param == "memory" else LocalWorld(isolated / "data")
    yield w
    w.close()
