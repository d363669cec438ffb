"""Fixtures for the world suite: one conformance parameter per World implementation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_support import fresh_schema

from world import LocalWorld, MemoryWorld, World


@pytest.fixture(params=["memory", "local", "postgres"])
def world(request: pytest.FixtureRequest, isolated: Path) -> Iterator[World]:
    """Every World implementation, fresh per test (PostgreSQL: a schema of its own)."""
    if request.param == "postgres":
        from world.postgres import PostgresWorld

        with fresh_schema() as url:
            w: World = PostgresWorld(url)
            yield w
            w.close()
        return
    w = MemoryWorld() if request.param == "memory" else LocalWorld(isolated / "data")
    yield w
    w.close()


@pytest.fixture(params=["local", "postgres"])
def world_spec(request: pytest.FixtureRequest, isolated: Path) -> Iterator[str]:
    """Where a durable world is, for tests that open it from several processes: a data
    directory or a PostgreSQL URL (a schema of its own)."""
    if request.param == "postgres":
        with fresh_schema() as url:
            yield url
        return
    yield str(isolated / "data")
