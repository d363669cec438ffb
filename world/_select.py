"""Choosing a world from what a user typed: a PostgreSQL URL or a directory."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from ._errors import WorldError
from ._world import World

if TYPE_CHECKING:
    from .postgres import PostgresWorld

_SCHEMES = ("postgresql", "postgres")
# A scheme and a colon with one slash (`postgresql:/host`), or a PostgreSQL-looking name
# followed by `//` without its colon (`postgresql//host`): a URL typed wrong, not a folder.
_MANGLED = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]+:/(?!/)|(?i:postgres(?:ql)?|pg)//)")


def is_database_url(spec: str) -> bool:
    """Whether `spec` names a PostgreSQL database (`postgresql://…`), not a directory.

    Raises:
        ValueError: `spec` is a URL of another scheme or a mangled one. It would otherwise
            become a directory named after the URL, and a fleet whose hosts were given it
            would each run alone on a store of their own.
    """
    scheme, sep, _ = spec.partition("://")
    if sep:
        if scheme.lower() in _SCHEMES:
            return True
        raise ValueError(
            f"unknown world URL scheme {scheme!r} in {_shown(spec)!r}; "
            "expected postgresql://… or a directory"
        )
    if _MANGLED.match(spec):
        raise ValueError(
            f"malformed world URL {_shown(spec)!r}; expected postgresql://USER@HOST/DB "
            "or a directory"
        )
    return False


def postgres_world() -> type[PostgresWorld]:
    """`PostgresWorld`, imported on first use (psycopg costs start-up time and is an extra).

    Raises:
        WorldError: psycopg is not installed; the message says how to install it.
    """
    try:
        from .postgres import PostgresWorld
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
    from .local import LocalWorld

    return LocalWorld(spec, create=create)


def _shown(spec: str) -> str:
    """`spec` for an error line: a password hidden even where `spec` does not parse as a URL."""
    return re.sub(r":[^:/@]*@", ":***@", redact_url(spec))


def redact_url(url: str) -> str:
    """`url` with its password replaced by `***` (for messages and listings)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # a malformed URL (a bad port, brackets): say nothing after the scheme
        return url.partition("://")[0] + "://…" if "://" in url else "…"
    if password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
