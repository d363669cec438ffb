"""Choosing a world from what a user typed: a PostgreSQL URL or a directory."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from ._world import World


def is_database_url(spec: str) -> bool:
    """Whether `spec` names a PostgreSQL database (`postgresql://…`), not a directory."""
    return spec.startswith(("postgresql://", "postgres://"))


def open_world(spec: str | os.PathLike[str], *, create: bool = True) -> World:
    """The world `spec` names: `postgresql://…` → `PostgresWorld`, else a `LocalWorld` on that
    directory. `create=False` opens for reading: a missing world reads as empty."""
    if isinstance(spec, str) and is_database_url(spec):
        from .postgres import PostgresWorld  # psycopg is imported only when one is used

        return PostgresWorld(spec, create=create)
    from .local import LocalWorld

    return LocalWorld(spec, create=create)


def redact_url(url: str) -> str:
    """`url` with its password replaced by `***` (for messages and listings)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
