"""What a PostgreSQL world URL names: where, the schema, the lease and the pool size."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..._errors import WorldError
from . import schema as _pg_schema

_SCHEMES = ("postgresql", "postgres")
# A scheme and a colon with one slash (`postgresql:/host`), or a PostgreSQL-looking name
# followed by `//` without its colon (`postgresql//host`): a URL typed wrong, not a folder.
_MANGLED = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]+:/(?!/)|(?i:postgres(?:ql)?|pg)//)")


DEFAULT_SCHEMA = "eve"
DEFAULT_LEASE = 10.0  # seconds a lease lasts unrenewed (a frozen owner's sessions wait this)
DEFAULT_POOL = 8
RETRY_FOR = 30.0  # seconds a call retries a lost connection by default (a database restarting)
_OWN_PARAMS = ("schema", "lease", "pool", "retry")


@dataclass(frozen=True)
class _Target:
    conninfo: str  # the URL as libpq takes it (eve's own parameters removed)
    schema: str
    lease: float
    pool: int
    retry: float  # seconds a call retries a lost connection (`?retry=`)
    where: str  # for messages: host:port/database, no credentials


def _target(url: str) -> _Target:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    try:
        lease = float(own.get("lease", DEFAULT_LEASE))
        pool = int(own.get("pool", DEFAULT_POOL))
        retry = float(own.get("retry", RETRY_FOR))
        host = parts.hostname or "localhost"
        port = parts.port or 5432
    except ValueError as exc:
        raise WorldError(
            f"{redact_url(url)}: {exc}; use ?lease=SECONDS&pool=N&retry=SECONDS"
        ) from None
    if lease <= 0 or pool < 1 or retry <= 0:
        raise WorldError(
            f"{redact_url(url)}: lease and retry must be > 0 seconds and pool >= 1 connection"
        )
    database = parts.path.lstrip("/") or parts.username or "postgres"
    return _Target(
        conninfo=urlunsplit(parts._replace(query=urlencode(rest))),
        schema=_pg_schema.check_schema(own.get("schema", DEFAULT_SCHEMA)),
        lease=lease,
        pool=pool,
        retry=retry,
        where=f"{host}:{port}/{database}",
    )


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
