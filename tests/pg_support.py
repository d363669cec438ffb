"""A real PostgreSQL for the tests: `EVE_TEST_POSTGRES` (default the local server), one fresh
schema per test, dropped afterwards.

Outside CI an unreachable server skips the PostgreSQL cases (saying so); under CI (`CI=true`)
it fails them: there the server must run (`.ci/run` starts it).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"


def server_url() -> str:
    return os.environ.get("EVE_TEST_POSTGRES") or DEFAULT


_reachable: str | None = None  # "" reachable, else why not (asked once per test process)


def require_server() -> str:
    """The server's URL; skips (outside CI) or fails (under CI) when it cannot be reached."""
    global _reachable
    import psycopg

    if _reachable is None:
        try:
            with psycopg.connect(server_url(), connect_timeout=3):
                _reachable = ""
        except psycopg.Error as exc:
            _reachable = str(exc).strip().splitlines()[0]
    if _reachable:
        message = f"PostgreSQL at {server_url()} unreachable ({_reachable})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; under CI the PostgreSQL tests must run")
        pytest.skip(f"{message}; not under CI, so skipped (set EVE_TEST_POSTGRES)")
    return server_url()


def with_params(url: str, **params: str) -> str:
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={v}" for k, v in params.items())


@contextmanager
def fresh_schema(**params: str) -> Iterator[str]:
    """A world URL on a schema of its own, dropped (with everything in it) afterwards."""
    import psycopg

    url = require_server()
    schema = f"t_{secrets.token_hex(6)}"
    try:
        yield with_params(url, schema=schema, **params)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
