"""Choosing a world from what a user typed: a PostgreSQL URL or a directory."""

from __future__ import annotations

import os
import sys
import uuid
import weakref
from dataclasses import dataclass
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


@dataclass(frozen=True)
class StoreIdentity:
    """Which store a world is: ``id``, made once when the store was created (None: a store
    opened for reading that has none yet); ``where``, its directory or its URL without the
    password; ``format``, its store format; ``schema``, its PostgreSQL schema version (None
    for a directory)."""

    id: str | None
    where: str
    format: int
    schema: int | None = None


# A store that lives only as long as its world object (`MemoryWorld`): an id for the object.
_ephemeral: weakref.WeakKeyDictionary[World, str] = weakref.WeakKeyDictionary()


def store_identity(world: World) -> StoreIdentity:
    """The identity of the store `world` is open on, read from the store (a directory's
    FORMAT, a schema's `store_identity` row) at each call."""
    from .stores.local.layout import FORMAT_VERSION, store_id
    from .stores.local.world import LocalWorld

    if isinstance(world, LocalWorld):
        return StoreIdentity(store_id(world.path), str(world.path), FORMAT_VERSION)
    pg = sys.modules.get("world.stores.postgres.world")
    if pg is not None and isinstance(world, pg.PostgresWorld):
        from .stores.postgres import schema

        version = schema.VERSION
        return StoreIdentity(world.store_id(), world.url, schema.store_format(version), version)
    found = _ephemeral.setdefault(world, str(uuid.uuid4()))
    return StoreIdentity(found, repr(world), FORMAT_VERSION)
