"""Choosing a world from what a user typed: a PostgreSQL URL or a directory."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._errors import WorldError
from ._world import World
from .stores.postgres.urls import is_database_url

if TYPE_CHECKING:
    from .stores.postgres.world import PostgresWorld


def postgres_world() -> type[PostgresWorld]:
    """`PostgresWorld`, imported on first use (psycopg costs start-up time and is an extra).

    Raises:
        WorldError: psycopg is not installed; the message says how to install it.
    """
    try:
        from .stores.postgres.world import PostgresWorld
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("psycopg"):
            raise
        raise WorldError(
            f"a PostgreSQL world needs {exc.name}, which is not installed: "
            "pip install 'eve-durable[postgres]'"
        ) from None
    return PostgresWorld


def open_world(spec: str | os.PathLike[str], *, create: bool = True) -> World:
    """The world `spec` names: `postgresql://…` → `PostgresWorld`, else a `LocalWorld` on that
    directory. `create=False` opens for reading: a missing world reads as empty."""
    if isinstance(spec, str) and is_database_url(spec):
        return postgres_world()(spec, create=create)
    from .stores.local.world import LocalWorld

    return LocalWorld(spec, create=create)
