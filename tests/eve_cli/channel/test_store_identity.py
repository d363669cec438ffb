"""A store has an id, made once when it is created: `eve start` prints it in its serving line
and `GET /eve/v1/info` returns it with the world's redacted URL and format; a worker told which
store to serve (`--store-id`, `EVE_STORE_ID`) refuses, in one line naming both ids, a world
that is another store; a store replaced under a running worker makes it not ready (real
processes, a data directory and PostgreSQL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.eve_cli.channel.channel_support import WAIT, EveProcess
from tests.pg_support import fresh_schema, require_server, server_url
from world import redact_url

pytestmark = pytest.mark.slow  # real `eve start` processes, several per test

API = "/eve/v1"


def _start(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """An `eve start` expected to refuse (it exits at once)."""
    return subprocess.run(
        [sys.executable, "-m", "eve_cli", "start", "--port", "0", *args], capture_output=True,
        text=True, timeout=WAIT, env={**os.environ, **(env or {})},
    )  # fmt: skip


def _identity(server: EveProcess) -> dict[str, object]:
    info = httpx.get(f"{server.url}{API}/info", timeout=WAIT).json()
    world = info["world"]
    assert world["storeId"] and f"store {world['storeId']}, format {world['format']}" in (
        server.line
    ), server.line
    return dict(world)


def _refused(done: subprocess.CompletedProcess[str], found: str, expected: str) -> None:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert found in lines[0] and expected in lines[0] and "--store-id" in lines[0], lines[0]


def test_a_data_directory_has_one_id_and_a_worker_pinned_to_another_refuses(
    eve_process: Callable[..., EveProcess], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    server = eve_process("start", "--port", "0", "--world", str(data))
    world = _identity(server)
    made = json.loads((data / "FORMAT").read_text())["id"]
    assert world == {"where": str(data), "storeId": made, "format": 3, "schema": None}
    server.close()
    again = eve_process("start", "--port", "0", "--world", str(data), "--store-id", made)
    assert _identity(again)["storeId"] == made  # the id stays: made once, at creation
    again.close()
    other = str(uuid.uuid4())
    _refused(_start("--world", str(data), "--store-id", other), made, other)
    _refused(_start("--world", str(data), env={"EVE_STORE_ID": other}), made, other)
    assert json.loads((data / "FORMAT").read_text())["id"] == made  # nothing changed


@pytest.fixture
def pg_url() -> Iterator[str]:
    require_server()
    with fresh_schema() as url:
        yield url


def test_a_postgresql_store_has_one_id_and_a_replaced_one_is_not_ready(
    eve_process: Callable[..., EveProcess], pg_url: str
) -> None:
    import psycopg

    a = eve_process("start", "--port", "0", "--world", pg_url)
    b = eve_process("start", "--port", "0", "--world", pg_url)
    world = _identity(a)
    assert world["storeId"] == _identity(b)["storeId"]  # one store, whichever worker is asked
    assert world["where"] == redact_url(pg_url)
    assert world["schema"] and world["format"] == 2
    with fresh_schema() as elsewhere:  # a fleet's other database: another store
        _refused(_start("--world", elsewhere, "--store-id", str(world["storeId"])), "store ", str(
            world["storeId"]))  # fmt: skip
    schema = pg_url.rsplit("schema=", 1)[1]
    assert httpx.get(f"{a.url}{API}/ready", timeout=WAIT).status_code == 200
    with psycopg.connect(server_url(), autocommit=True) as conn:  # restored from another store
        conn.execute(f'UPDATE "{schema}".store_identity SET id = gen_random_uuid()')
    ready = httpx.get(f"{a.url}{API}/ready", timeout=WAIT)
    assert ready.status_code == 503 and ready.json()["problems"] == ["store changed"], ready.text
    a.stderr_until(f"not ready: the world is now store .*, not {world['storeId']}")
