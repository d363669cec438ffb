"""A store of format 1 (pre-release, `store_format_1/`) is migrated once, when it is opened:
it then reads exactly as the pre-release code read it, goes on in the current form, and a
SIGKILL at any point of the migration leaves the old store or the new one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import filelock
import pytest

from eve_cli.runtime import Runtime
from tests.eve_cli.cli.cli_helpers import Eve, json_lines
from world import LocalWorld, StoreFormatError, _journal

FIXTURE = Path(__file__).resolve().parent / "store_format_1"
OLDEST, LATEST = "s_0d1bb0e641a9703a263634a6", "s_b0026363203a7029e2b308b6"
SESSIONS = (OLDEST, LATEST)


def _copy(tmp_path: Path, name: str = "data") -> Path:
    copy = tmp_path / name
    shutil.copytree(FIXTURE / "store", copy)
    return copy


def _files(data: Path) -> dict[str, bytes]:
    """Every file of the store by name (the lock files, which a migration takes, aside)."""
    return {
        str(p.relative_to(data)): p.read_bytes()
        for p in sorted(data.rglob("*"))
        if p.is_file() and p.suffix != ".lock"
    }


# Fields the JSON gained since: usage totals (issue 34); the session view's and its listing
# row's (issue 33: the one fold; a page of its turns).
ADDED = frozenset(
    {"first", "reply", "usage", "marks", "modelMs", "steered", "answer", "answeredIn", "endedIn"}
    | {"turnsFrom"}
)


def _same_data(found: Any, expected: Any) -> None:
    """`found` (this version's JSON) says what `expected` (the pre-release code's) said: the
    same values; its size on disk differs (the journals were rewritten), and a field added
    since is null (`wakeAt`) or one of :data:`ADDED`."""
    if isinstance(expected, dict):
        assert isinstance(found, dict)
        extra = {k for k in found.keys() - expected.keys() - ADDED if found[k] is not None}
        assert not extra, extra
        for key, value in expected.items():
            if key != "bytes":
                _same_data(found[key], value)
    elif isinstance(expected, list):
        assert isinstance(found, list) and len(found) == len(expected)
        for a, b in zip(found, expected, strict=True):
            _same_data(a, b)
    else:
        assert found == expected


def _reads(eve: Eve, data: Path) -> dict[str, Any]:
    commands = {"sessions": ["inspect", "--json"]}
    for sid in SESSIONS:
        commands[f"inspect.{sid}"] = ["inspect", sid, "--json"]
        commands[f"events.{sid}"] = ["inspect", sid, "--events", "--json"]
        commands[f"log.{sid}"] = ["log", sid, "--json"]
        commands[f"step.{sid}"] = ["inspect", sid, "--step", "2.1", "--json"]
    out = {}
    for name, args in commands.items():
        result = eve(*args, "--data", str(data))
        assert result.exit_code == 0, (args, result.output)
        out[name] = _parse(result.stdout)
    return out


def _parse(text: str) -> Any:
    """A JSON document, or JSON lines (`--events --json`) as a list."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json_lines(text)


def _expected(name: str) -> Any:
    return _parse((FIXTURE / "expected" / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture migrated once, uninterrupted (what every other run must end as)."""
    data = _copy(tmp_path_factory.mktemp("migrated"))
    LocalWorld(data).close()
    return data


def test_a_format_1_store_reads_as_the_pre_release_code_read_it(eve: Eve, tmp_path: Path) -> None:
    data = _copy(tmp_path)
    first = eve("inspect", "--data", str(data))
    assert first.exit_code == 0, first.output
    [line] = [ln for ln in first.stderr.splitlines() if "store format" in ln]
    assert line.startswith(f"eve: {data}: migrated store format 1 -> 3: 2 run families"), line
    assert json.loads((data / "FORMAT").read_text())["version"] == 3
    assert not (data / ".migrating").exists()
    for name, found in _reads(eve, data).items():
        _same_data(found, _expected(name))
    assert "store format" not in eve("inspect", "--data", str(data)).stderr  # once only


def test_the_migrated_files_are_of_the_one_current_form(migrated: Path) -> None:
    for sid in SESSIONS:
        journal = _journal.read_file(str(migrated / "runs" / sid / "journal.msgpack"))
        assert journal.records[0][1]["version"] == _journal.JOURNAL_VERSION
        kinds = {rec.get("t") for _, rec in journal.records}
        assert "child_done" not in kinds and not any("run" in r for _, r in journal.records)
        inbox = _journal.read_inbox_file(str(migrated / "runs" / sid / "inbox.msgpack"))
        assert inbox.records[0][1]["version"] == _journal.INBOX_VERSION
        assert all("k" in rec for _, rec in inbox.records[1:])
        starts = [r["input"] for _, r in journal.records if r.get("t") in ("start", "gen")]
        assert {s.get("v") for s in starts if "snap" not in s} == {3}
    # The latest pre-release forms were the current ones: their bytes are kept exactly.
    for name in ("journal.msgpack", "inbox.msgpack"):
        old = FIXTURE / "store" / "runs" / LATEST / name
        assert (migrated / "runs" / LATEST / name).read_bytes() == old.read_bytes()


def test_migrated_sessions_go_on(eve: Eve, tmp_path: Path) -> None:
    data = _copy(tmp_path)
    for sid in SESSIONS:
        result = eve("chat", "--data", str(data), "-s", sid, "-p", "count the words in a b c")
        assert result.exit_code == 0, result.output
        assert result.stdout == "That text has 3 words.\n"
    rt = Runtime(data, load_agent=False)
    try:
        for sid in SESSIONS:
            assert rt.session(sid)["turns"][-1]["status"] == "completed"
            assert len(rt.session(sid)["turns"]) == 6
    finally:
        rt.close()


def test_doctor_says_what_a_migration_would_do_and_changes_nothing(
    eve: Eve, tmp_path: Path
) -> None:
    data = _copy(tmp_path)
    before = _files(data)
    result = eve("doctor", "--data", str(data))
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert "would migrate store format 1 -> 3: 2 run families" in line, line
    assert "dry run: nothing changed" in line and "eve doctor --migrate" in line
    assert _files(data) == before
    done = eve("doctor", "--migrate", "--data", str(data))
    assert done.exit_code == 0, done.output
    assert "migrated store format 1 -> 3" in done.stderr and "0 damaged" in done.stdout


def test_a_store_in_use_is_not_migrated_under_its_user(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    before = _files(data)
    held = filelock.FileLock(str(data / "runs" / LATEST / "owner.lock"), timeout=0)
    with held, pytest.raises(StoreFormatError) as err:  # an eve of the version that wrote it
        LocalWorld(data)
    assert "\n" not in str(err.value) and "in use by another process" in str(err.value)
    assert _files(data) == before
    LocalWorld(data).close()  # once it is free


# A migration holds two locks per session until its commit; a child process whose open-file
# limit leaves room for fewer (3 more descriptor numbers than the lowest free one, below the 4
# locks of the fixture's two sessions) stands for a store of thousands of sessions under the
# usual limit of 1,024. (The limit bounds descriptor numbers: the next open takes the lowest.)
_LOW_LIMIT = """
import os, resource, sys
import eve_cli.runtime, world
lowest = os.open(os.devnull, os.O_RDONLY)
os.close(lowest)
limit = lowest + 3
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit if sys.argv[2] == "hard" else hard))
try:
    opened = world.LocalWorld(sys.argv[1])
except world.StoreFormatError as exc:
    print("refused:", exc)
else:
    put_back = resource.getrlimit(resource.RLIMIT_NOFILE)[0] == limit
    print("migrated:", opened.migration is not None, put_back)
    opened.close()
"""


def test_a_migration_makes_room_for_its_locks_under_a_low_open_file_limit(
    tmp_path: Path,
) -> None:
    data = _copy(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _LOW_LIMIT, str(data), "soft"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.strip() == "migrated: True True", done.stderr  # the limit put back
    assert json.loads((data / "FORMAT").read_text())["version"] > 1


def test_a_hard_open_file_limit_too_low_to_migrate_is_one_clear_error(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    before = _files(data)
    done = subprocess.run(
        [sys.executable, "-c", _LOW_LIMIT, str(data), "hard"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    out = done.stdout.strip()
    assert out.startswith("refused:") and "\n" not in out, done.stderr
    assert "holds 4 file locks at once" in out and "ulimit -n" in out
    assert "nothing was changed" in out
    assert _files(data) == before


KILLS = [
    ("crash_migrate_staged@1", "old"),
    ("crash_migrate_staged@2", "old"),
    ("crash_migrate_committed", "committed"),
    ("crash_migrate_moved@1", "committed"),
    ("crash_migrate_moved@2", "committed"),
]


@pytest.mark.parametrize(("fault", "after"), KILLS)
def test_a_kill_mid_migration_leaves_the_old_store_or_the_new(
    eve: Eve, tmp_path: Path, migrated: Path, fault: str, after: str
) -> None:
    data = _copy(tmp_path)
    before = _files(data)
    code = "import sys, eve_cli.runtime, world; world.LocalWorld(sys.argv[1])"
    env = {**os.environ, "EVE_FAULTS": fault}
    killed = subprocess.run([sys.executable, "-c", code, str(data)], env=env, timeout=60)
    assert killed.returncode == -9  # SIGKILL, mid-migration
    left = {k: v for k, v in _files(data).items() if not k.startswith(".migrating")}
    if after == "old":
        assert left == before  # nothing of the old store was touched
    else:  # past the commit: the staged files are durable, the next open moves the rest
        assert (data / ".migrating" / "COMMITTED").exists()
    world = LocalWorld(data)
    assert world.migration is not None and world.migration.resumed == (after != "old")
    world.close()
    now, done = _files(data), _files(migrated)
    assert now.keys() == done.keys()
    for name, content in done.items():
        if name.endswith("head.msgpack"):  # a head carries the time it was written
            assert _head(now[name]) == _head(content), name
        elif name == "FORMAT":  # each migration gives the store an id of its own
            assert {**json.loads(now[name]), "id": 0} == {**json.loads(content), "id": 0}
        else:
            assert now[name] == content, name
    _same_data(json.loads(eve("log", OLDEST, "--json", "--data", str(data)).stdout),
               _expected(f"log.{OLDEST}"))  # fmt: skip


def _head(data: bytes) -> Any:
    head = _journal.head_from(data)
    assert head is not None
    return {k: v for k, v in head.items() if k != "written"}
