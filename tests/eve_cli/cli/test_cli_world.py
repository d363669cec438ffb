"""Choosing the world: `--world URL` on every command and `EVE_WORLD` (a PostgreSQL database),
`--world DIR` / `--data DIR` (a data directory); what a user sees when the database is
unreachable or newer than this eve; the password never shown."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.eve_cli.cli.cli_helpers import Eve, EveProc, json_lines
from tests.pg_support import fresh_schema, require_server
from world import PostgresWorld
from world.stores.postgres.schema import VERSION


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as found:
        yield found.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")


def test_world_url_on_every_command_and_nothing_on_disk(eve: Eve, url: str, isolated: Path) -> None:
    sid = json_lines(eve("chat", "--world", url, "--json", "-p", "hello").stdout)[0]["sessionId"]
    listed = eve("inspect", "--world", url, "--json")
    assert listed.exit_code == 0, listed.output
    assert [row["id"] for row in json.loads(listed.stdout)] == [sid]
    again = eve("--world", url, "chat", "-s", sid, "-p", "what time is it?")
    assert again.exit_code == 0, again.output
    assert "It is" in again.stdout
    view = json.loads(eve("inspect", sid, "--world", url, "--json").stdout)
    assert len(view["turns"]) == 2
    resumed = eve("resume", "--all", "--world", url)
    assert resumed.exit_code == 0 and "nothing to resume" in resumed.stdout
    assert "hunter2" not in resumed.stdout and "***" in resumed.stdout
    assert not (isolated / ".workflow-data").exists()  # no local world was made on the way
    assert eve("inspect", "--json").stdout.strip() == "[]"  # the local one is another world


def test_eve_world_names_the_database_and_data_still_chooses_a_directory(
    eve: Eve, url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EVE_WORLD", url)
    sid = json_lines(eve("chat", "--json", "-p", "hello").stdout)[0]["sessionId"]
    assert [row["id"] for row in json.loads(eve("inspect", "--json").stdout)] == [sid]
    local = tmp_path / "local"
    other = json_lines(eve("chat", "--data", str(local), "--json", "-p", "hi").stdout)
    assert (local / "runs" / other[0]["sessionId"]).is_dir()
    by_world = json.loads(eve("inspect", "--world", str(local), "--json").stdout)
    assert [row["id"] for row in by_world] == [other[0]["sessionId"]]
    assert [row["id"] for row in json.loads(eve("inspect", "--json").stdout)] == [sid]


def test_an_unreachable_database_is_one_line_with_the_host_and_what_to_check(
    eve_proc: EveProc,
) -> None:
    for args in (["inspect"], ["chat", "-p", "hi"], ["resume", "--all"]):
        result = eve_proc("--world", "postgresql://eve:hunter2@127.0.0.1:9/eve", *args)
        assert result.returncode == 1, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr
        assert "127.0.0.1:9/eve" in lines[0] and "server is running" in lines[0]
        assert "hunter2" not in result.stderr + result.stdout


def test_a_schema_from_a_newer_eve_is_refused_in_one_line(eve_proc: EveProc, url: str) -> None:
    PostgresWorld(url).close()
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(require_server(), autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{schema}".schema_version VALUES (%s)', [VERSION + 1])
    result = eve_proc("chat", "--world", url, "-p", "hi")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "newer eve" in result.stderr
    assert "upgrade eve" in result.stderr


def test_gc_and_doctor_work_on_the_database(eve: Eve, url: str) -> None:
    sid = json_lines(eve("chat", "--world", url, "--json", "-p", "hello").stdout)[0]["sessionId"]
    doctor = eve("doctor", "--world", url, "--json")
    assert doctor.exit_code == 0, doctor.output
    assert json.loads(doctor.stdout)["ok"] is True
    kept = eve("gc", "--world", url, "--older-than", "0s", "--json")
    assert kept.exit_code == 0, kept.output
    assert [e["action"] for e in json.loads(kept.stdout)["entries"]] == [
        "skipped: waiting (use --waiting)"
    ]
    gone = eve("--world", url, "gc", "--older-than", "0s", "--waiting", "--json")
    report = json.loads(gone.stdout)
    assert [(e["id"], e["action"]) for e in report["entries"]] == [(sid, "removed")]
    assert report["bytesFreed"] > 0 and "hunter2" not in gone.stdout
    assert eve("inspect", "--world", url, "--json").stdout.strip() == "[]"


def _damage(url: str, sid: str) -> str:
    """Make the session's second journal record and its second event bytes that are no
    msgpack (a byte no encoding begins with, before them), make its head unreadable, leave a
    hook claim of a family that is gone; the schema's quoted name."""
    s = '"' + url.rsplit("schema=", 1)[1].split("&")[0] + '"'
    with psycopg.connect(require_server(), autocommit=True) as conn:
        conn.execute(
            f"UPDATE {s}.records SET body = '\\xc1'::bytea || body WHERE root = %s AND pos = 2",
            [sid],
        )
        conn.execute(
            f"UPDATE {s}.stream_items SET item = '\\xc1'::bytea || item "
            f"WHERE stream = (SELECT id FROM {s}.streams WHERE name = %s) AND idx = 1",
            [f"events.{sid}"],
        )
        conn.execute(f"UPDATE {s}.heads SET head = '\\x00ff' WHERE root = %s", [sid])
        conn.execute(f"INSERT INTO {s}.hooks VALUES ('a-secret-token', 's_gone', 's_gone')")
    return s


def test_doctor_finds_and_repairs_damage_in_the_database(eve: Eve, url: str) -> None:
    sid = json_lines(eve("chat", "--world", url, "--json", "-p", "hello").stdout)[0]["sessionId"]
    s = _damage(url, sid)
    found = eve("doctor", "--world", url, "--json")
    assert found.exit_code != 0
    report = json.loads(found.stdout)
    states = {
        (f["path"], f["state"], f["offset"]) for f in report["findings"] if f["state"] != "ok"
    }
    assert states == {
        (f"{sid}/journal", "corrupt", 2),
        (f"streams/events.{sid}", "corrupt", 1),
        (f"{sid}/head", "unreadable", 0),
        ("hooks of s_gone", "dangling", None),
        (f"{sid}/usage", "stale", None),  # (a record edited to another size)
    }
    assert "a-secret-token" not in found.stdout and "hunter2" not in found.stdout
    with psycopg.connect(require_server(), autocommit=True) as conn:
        damaged = {
            row[0]: bytes(row[1])
            for row in conn.execute(
                f"SELECT 'r', body FROM {s}.records WHERE root = %s AND pos = 2 UNION ALL "
                f"SELECT 'e', item FROM {s}.stream_items WHERE idx = 1 AND stream = "
                f"(SELECT id FROM {s}.streams WHERE name = %s)",
                [sid, f"events.{sid}"],
            )
        }
    fixed = eve("doctor", "--world", url, "--repair", "--json")
    repairs = {(r["path"], r["state"]) for r in json.loads(fixed.stdout)["repairs"]}
    assert repairs == {
        (f"{sid}/journal", "repaired"),
        (f"streams/events.{sid}", "repaired"),
        (f"{sid}/head", "repaired"),
        ("hooks of s_gone", "quarantined"),
        (f"{sid}/usage", "repaired"),
    }
    with psycopg.connect(require_server(), autocommit=True) as conn:
        kept = conn.execute(f"SELECT kind, data FROM {s}.quarantine ORDER BY id").fetchall()
    kinds = [k for k, _ in kept]
    assert sorted(kinds) == ["head", "hook", "journal", "stream"]
    assert {bytes(d) for k, d in kept if k in ("journal", "stream")} == set(damaged.values())
    after = json.loads(eve("doctor", "--world", url, "--json").stdout)["findings"]
    left = {(f["path"], f["state"]) for f in after if f["state"] != "ok"}
    # What the gaps replaced is lost (reported), read around: the session goes on; nothing is
    # repaired again.
    assert left == {(f"{sid}/journal", "lost"), (f"streams/events.{sid}", "lost")}
    more = eve("chat", "--world", url, "-s", sid, "-p", "what time is it?")
    assert more.exit_code == 0 and "It is" in more.stdout, more.output
    again = eve("doctor", "--world", url, "--repair", "--json")
    assert json.loads(again.stdout)["repairs"] == []


@pytest.mark.parametrize(
    ("how", "value", "said"),
    [
        ("option", "postgressql://eve:hunter2@127.0.0.1/eve", "scheme 'postgressql'"),
        ("env", "postgresql//eve:hunter2@127.0.0.1/eve", "malformed world URL"),
        ("option", "mysql://eve:hunter2@127.0.0.1/eve", "unknown world URL scheme 'mysql'"),
        ("env", "postgresql:/127.0.0.1/eve", "malformed world URL"),
        ("option", "./stores/postgresql://eve@h/db", "unknown world URL scheme './stores/"),
    ],
)
def test_a_mistyped_world_url_is_refused_and_makes_no_store_of_its_own(
    eve_proc: EveProc,
    isolated: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    value: str,
    said: str,
) -> None:
    """A typo'd URL must not become a data directory named after it: each host of a fleet
    given it would run alone, its sessions invisible to the others."""
    if how == "env":
        monkeypatch.setenv("EVE_WORLD", value)
    before = sorted(p.name for p in isolated.iterdir())
    for args in (["inspect"], ["chat", "-p", "hi"], ["start", "--port", "0"]):
        result = eve_proc(*args, *(["--world", value] if how == "option" else []))
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.stderr
        assert "hunter2" not in result.stderr + result.stdout
    assert sorted(p.name for p in isolated.iterdir()) == before


def test_a_hole_an_older_eve_left_in_a_crash_is_read_around_and_repaired(
    eve: Eve, url: str
) -> None:
    sid = json_lines(eve("chat", "--world", url, "--json", "-p", "hello").stdout)[0]["sessionId"]
    s = '"' + url.rsplit("schema=", 1)[1].split("&")[0] + '"'
    with psycopg.connect(require_server(), autocommit=True) as conn:
        # As a batch committed without waiting for its WAL, lost in a crash of the server
        # while later ones were kept: items missing in the middle of the events.
        length = conn.execute(
            f"SELECT length FROM {s}.streams WHERE name = %s", [f"events.{sid}"]
        ).fetchone()
        assert length is not None and length[0] > 4
        conn.execute(
            f"DELETE FROM {s}.stream_items WHERE idx IN (2, 3) AND stream = "
            f"(SELECT id FROM {s}.streams WHERE name = %s)",
            [f"events.{sid}"],
        )
    found = json.loads(eve("doctor", "--world", url, "--json").stdout)["findings"]
    assert [(f["state"], f["offset"]) for f in found if f["path"] == f"streams/events.{sid}"] == [
        ("corrupt", 2)
    ]
    shown = eve("inspect", "--world", url, sid)  # read around before any repair
    assert shown.exit_code == 0 and "doctor" not in shown.output, shown.output
    fixed = eve("doctor", "--world", url, "--repair", "--json")
    repairs = json.loads(fixed.stdout)["repairs"]
    assert [(r["path"], r["state"]) for r in repairs] == [(f"streams/events.{sid}", "repaired")]
    assert "2 missing row(s) recorded as gaps" in repairs[0]["detail"]
    after = json.loads(eve("doctor", "--world", url, "--json").stdout)["findings"]
    assert {(f["path"], f["state"]) for f in after if f["state"] != "ok"} == {
        (f"streams/events.{sid}", "lost")
    }
    more = eve("chat", "--world", url, "-s", sid, "-p", "what time is it?")
    assert more.exit_code == 0 and "It is" in more.stdout, more.output
    assert eve("doctor", "--world", url, "--repair", "--json").exit_code == 0
