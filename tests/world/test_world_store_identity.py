"""A store's id (`world.store_identity`): made once when the store is created, given once to a
store made before stores had ids at its next open for writing (never by a reader), kept by a
migration; one row made with a PostgreSQL schema, the same for every world opened on it."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import uuid
from pathlib import Path

from tests.pg_support import fresh_schema, require_server
from world import LocalWorld, MemoryWorld, open_world, store_identity

FORMAT_1 = Path(__file__).resolve().parents[1] / "eve_cli" / "cli" / "store_format_1" / "store"


def _id_of(data: Path) -> str | None:
    found = json.loads((data / "FORMAT").read_text()).get("id")
    return None if found is None else str(found)


def test_a_new_store_gets_an_id_that_stays(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "d")
    made = store_identity(world)
    assert made.id == str(uuid.UUID(made.id or "")) == _id_of(tmp_path / "d")
    assert (made.where, made.format, made.schema) == (str(tmp_path / "d"), 3, None)
    world.close()
    assert store_identity(LocalWorld(tmp_path / "d")).id == made.id
    assert store_identity(LocalWorld(tmp_path / "e")).id != made.id


def _open(path: str) -> None:
    LocalWorld(path).close()


def test_a_store_without_an_id_gets_one_at_its_next_open_for_writing(tmp_path: Path) -> None:
    data = tmp_path / "d"
    LocalWorld(data).close()
    (data / "FORMAT").write_text('{"format": "eve-world", "version": 3}\n')  # made before ids
    assert store_identity(LocalWorld(data, create=False)).id is None  # a reader writes nothing
    assert _id_of(data) is None
    with multiprocessing.get_context("spawn").Pool(4) as pool:  # several at once: one id
        pool.map(_open, [str(data)] * 8)
    given = _id_of(data)
    assert given and store_identity(LocalWorld(data)).id == given


def test_a_migration_gives_the_store_an_id_and_keeps_it(tmp_path: Path) -> None:
    data = tmp_path / "d"
    shutil.copytree(FORMAT_1, data)
    world = LocalWorld(data)
    assert world.migration is not None and world.migration.from_version == 1
    assert store_identity(world).id == _id_of(data) is not None
    world.close()


def test_a_memory_world_has_an_id_of_its_own() -> None:
    a, b = MemoryWorld(), MemoryWorld()
    assert store_identity(a).id == store_identity(a).id != store_identity(b).id


def test_a_postgresql_store_has_one_id_made_with_its_schema() -> None:
    import psycopg

    url = require_server()
    with fresh_schema() as spec:
        schema = spec.rsplit("schema=", 1)[1]
        reader = open_world(spec, create=False)
        assert store_identity(reader).id is None  # no store there yet, and none made
        reader.close()
        first, second = open_world(spec), open_world(spec)
        made = store_identity(first)
        assert made.id == str(uuid.UUID(made.id or "")) == store_identity(second).id
        assert made.schema and made.format == 2 and "schema=" + schema in made.where
        with psycopg.connect(url, autocommit=True) as conn:  # a schema made before ids
            conn.execute(f'DROP TABLE "{schema}".store_identity')
        assert store_identity(first).id is None
        third = open_world(spec)
        assert store_identity(third).id not in (None, made.id)
        for world in (first, second, third):
            world.close()
