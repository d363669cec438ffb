"""Fixtures shared by every test: each test runs in its own directory and environment."""

from __future__ import annotations

import compileall
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.worlds import WORLDS, WorldOpener, world_kinds
from world import World

# Property tests check behaviour, not speed: a shared, loaded machine must not fail them on
# hypothesis's per-example deadline (speed is measured by benchmarks/).
settings.register_profile("eve", deadline=None)
settings.load_profile("eve")

# Variables that would let a test reach a real provider or a user's data.
_SCRUBBED = (
    "EVE_DATA_DIR",
    "EVE_AUTH_TOKEN",
    "EVE_AUTH_TOKENS",
    "EVE_AUTH_JWKS",
    "EVE_AUTH_ISSUER",
    "EVE_AUTH_AUDIENCE",
    "EVE_AUTH_CLIENT_ID",
    "EVE_AUTH_HS256_SECRET",
    "EVE_FAULTS",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "EVE_JUDGE_MODEL",
)

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run in a fresh working directory whose `.workflow-data/` is this test's own."""
    for name in _SCRUBBED:
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("EVE_DATA_DIR", str(work / ".workflow-data"))
    monkeypatch.setenv("NO_COLOR", "1")
    # Subprocesses import this checkout, whatever the current directory is.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    yield work


def pytest_configure(config: pytest.Config) -> None:
    """Compile this checkout's bytecode once for the `eve` processes the tests start.

    Where PYTHONDONTWRITEBYTECODE is set (as on CI machines) no process writes bytecode, so each
    of the hundreds of subprocesses would compile `eve_cli` and `world` from source again (about
    50 ms of CPU each); the variable stops only writing it, not reading it.
    """
    del config
    if sys.dont_write_bytecode:
        for package in ("world", "eve_cli"):
            compileall.compile_dir(REPO_ROOT / package, quiet=1)


@pytest.fixture(params=world_kinds())
def world_kind(request: pytest.FixtureRequest) -> str:
    """The name of the backend this test runs on (tests/worlds.py): one run per backend."""
    return str(request.param)


@pytest.fixture
def open_world(world_kind: str, isolated: Path) -> Iterator[WorldOpener]:
    """Opens this test's world of kind `world_kind`: each call another opener of the same
    storage (as another process would be); every world opened is closed at the end."""
    backend = WORLDS[world_kind]
    opened: list[World] = []
    with backend.place(isolated) as where:

        def opener() -> World:
            opened.append(backend.open(where))
            return opened[-1]

        yield opener
        for world in opened:
            world.close()


@pytest.fixture
def world(open_world: WorldOpener) -> World:
    """A fresh world of every kind (the conformance parameter)."""
    return open_world()


@pytest.fixture(params=world_kinds(shared=True))
def world_spec(request: pytest.FixtureRequest, isolated: Path) -> Iterator[str]:
    """Where a world other processes can open is (a data directory, a PostgreSQL URL): for
    tests that open it from several processes."""
    with WORLDS[str(request.param)].place(isolated) as where:
        yield where
