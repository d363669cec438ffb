"""The worlds that world-independent tests run over: one entry per `World` implementation.

`WORLDS` maps a name to a `Backend`; the `world_kind` fixture (tests/conftest.py) is
parametrized over it, so a test asking for `world`, `open_world` or `world_spec` runs once per
backend. A new backend adds itself here; one that needs a server skips outside CI only
(tests/pg_support.py). `shared`: other processes can open it (CLI and subprocess tests).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.outside_world import OutsideWorld
from tests.pg_support import fresh_schema
from world import LocalWorld, MemoryWorld, World

# Opens the test's world again: another opener of the same storage at each call.
WorldOpener = Callable[[], World]


@dataclass(frozen=True)
class Backend:
    """How a test gets a world of one kind: `place(tmp)` makes the storage for one test and
    says where it is (a directory, a URL; removed afterwards), `open(where)` opens it, each
    call another opener of the same storage (as another process would be)."""

    place: Callable[[Path], contextlib.AbstractContextManager[str]]
    open: Callable[[str], World]
    shared: bool


_MEMORY: dict[str, World] = {}


@contextlib.contextmanager
def _memory_place(tmp: Path) -> Iterator[str]:
    key = secrets.token_hex(8)
    try:
        yield key
    finally:
        _MEMORY.pop(key, None)


@contextlib.contextmanager
def _local_place(tmp: Path) -> Iterator[str]:
    yield str(tmp / "data")


@contextlib.contextmanager
def _postgres_place(tmp: Path) -> Iterator[str]:
    with fresh_schema() as url:
        yield url


def _open_postgres(url: str) -> World:
    from world import PostgresWorld

    return PostgresWorld(url)


WORLDS: dict[str, Backend] = {
    # One object per test: the memory world is reached only through it.
    "memory": Backend(_memory_place, lambda key: _MEMORY.setdefault(key, MemoryWorld()), False),
    # A world written outside `world/` from its public names (tests/outside_world.py).
    "outside": Backend(_memory_place, lambda key: _MEMORY.setdefault(key, OutsideWorld()), False),
    "local": Backend(_local_place, LocalWorld, True),
    "postgres": Backend(_postgres_place, _open_postgres, True),
}


def world_kinds(*, shared: bool = False) -> list[str]:
    """Names of the backends (only those other processes can open, with `shared`)."""
    return [name for name, backend in WORLDS.items() if backend.shared or not shared]
