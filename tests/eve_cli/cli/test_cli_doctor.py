"""`eve doctor`: every file of a real data directory checked; repairs never delete."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from eve_cli.cli.app import app
from eve_cli.runtime import Runtime
from world import _journal

runner = CliRunner()


def _sessions(data: Path, messages: tuple[str, ...] = ("hello", "add 2 and 3")) -> list[str]:
    """Real sessions of the built-in agent (demo model), driven to their next wait."""

    async def main() -> list[str]:
        rt = Runtime(data)
        sids = []
        for text in messages:
            sid = await rt.create_session()
            await rt.deliver(sid, text)
            await rt.drive(sid)
            sids.append(sid)
        rt.close()
        return sids

    return asyncio.run(main())


def _doctor(*args: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(app, ["doctor", "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def _by_path(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in report["findings"]}


@pytest.fixture
def data(isolated: Path) -> Path:
    path = isolated / "data"
    _sessions(path)
    return path


def test_a_clean_directory_checks_every_file(data: Path) -> None:
    code, report = _doctor("--data", str(data))
    assert code == 0 and report["ok"] and report["repairs"] == []
    found = _by_path(report)
    on_disk = {str(p.relative_to(data)) for p in data.rglob("*") if p.is_file()}
    assert on_disk == set(found)
    kinds = {f["kind"] for f in found.values()}
    assert {"format", "journal", "inbox", "head", "lock", "stream", "index", "hook"} <= kinds
    assert all(f["state"] == "ok" for f in found.values())
    table = runner.invoke(app, ["doctor", "--data", str(data), "--all"])
    assert table.exit_code == 0 and "0 damaged" in table.stdout and "journal" in table.stdout


def test_torn_tails_are_warnings_and_repair_keeps_the_cut_bytes(data: Path) -> None:
    journal = next(data.glob("runs/*/journal.msgpack"))
    stream = next(data.glob("streams/events.*.msgpack"))
    for path in (journal, stream):
        with open(path, "ab") as f:
            f.write(b"\x93\x01\xce\x00\x01")  # the start of a record that never finished
    code, report = _doctor("--data", str(data))
    torn = {p for p, f in _by_path(report).items() if f["state"] == "torn"}
    assert code == 0 and torn == {str(journal.relative_to(data)), str(stream.relative_to(data))}

    code, report = _doctor("--data", str(data), "--repair")
    assert code == 0 and report["ok"]
    assert {r["state"] for r in report["repairs"]} == {"repaired"}
    assert all(f["state"] == "ok" for f in report["findings"])
    tails = sorted((data / "quarantine").rglob("*.tail-*"))
    assert [t.read_bytes() for t in tails] == [b"\x93\x01\xce\x00\x01"] * 2
    assert not _journal.read_file(str(journal)).torn


def test_damage_is_reported_with_file_and_offset_and_repair_quarantines_it(data: Path) -> None:
    journal = next(data.glob("runs/*/journal.msgpack"))
    sid = journal.parent.name
    records = _journal.read_file(str(journal)).records
    original = journal.read_bytes()
    damaged = bytearray(original)
    damaged[records[4][0] + 5] ^= 0xFF
    journal.write_bytes(bytes(damaged))

    result = runner.invoke(app, ["doctor", "--data", str(data)])
    assert result.exit_code == 1
    text = result.stdout.replace("\n", "")
    assert str(records[4][0]) in text and "corrupt" in text and "--repair" in text
    code, report = _doctor("--data", str(data))
    bad = _by_path(report)[f"runs/{sid}/journal.msgpack"]
    assert code == 1 and (bad["state"], bad["offset"]) == ("corrupt", records[4][0])

    code, report = _doctor("--data", str(data), "--repair")
    assert code == 0 and report["ok"]
    # The damaged record's bytes are kept; a gap record of their length took their place, so
    # every other record is where it was (a finished turn's record: the session goes on).
    start, end = records[4][0], records[5][0]
    [kept] = list((data / "quarantine").rglob(f"journal.msgpack.bytes-{start}"))
    assert kept.read_bytes() == bytes(damaged[start:end])  # nothing lost
    after = journal.read_bytes()
    assert len(after) == len(original) and after[:start] == original[:start]
    assert after[end:] == original[end:]
    assert _journal.read_file(str(journal)).records[4][1]["t"] == "gap"
    [note] = list((data / "quarantine").rglob("NOTE.txt"))
    assert f"runs/{sid}/journal.msgpack" in note.read_text() and str(start) in note.read_text()
    lost = _by_path(report)[f"runs/{sid}/journal.msgpack"]
    assert (lost["state"], lost["offset"]) == ("lost", start)
    rt = Runtime(data)
    assert {row["id"] for row in rt.sessions()} >= {sid}
    rt.close()


def test_unreadable_files_are_moved_never_deleted(data: Path) -> None:
    head = next(data.glob("runs/*/head.msgpack"))
    head.write_bytes(b"\xc1garbage")
    leftover = head.with_name("head.msgpack.tmp4242")
    leftover.write_bytes(b"half")
    (data / "hooks" / "t-nobody").write_text("r_gone")
    code, report = _doctor("--data", str(data))
    states = {p: f["state"] for p, f in _by_path(report).items() if f["state"] != "ok"}
    assert code == 0 and set(states.values()) == {"stale", "leftover", "dangling"}

    code, report = _doctor("--data", str(data), "--repair")
    assert code == 0 and {r["state"] for r in report["repairs"]} == {"quarantined"}
    assert not head.exists() and not leftover.exists()
    kept = [p for p in (data / "quarantine").rglob("*") if p.is_file() and p.name != "NOTE.txt"]
    moved = {p.name: p.read_bytes() for p in kept}
    assert moved == {"head.msgpack": b"\xc1garbage", "head.msgpack.tmp4242": b"half",
                     "t-nobody": b"r_gone"}  # fmt: skip
    assert all(f["state"] == "ok" for f in report["findings"])


def test_a_file_in_use_by_a_live_owner_is_left_alone(data: Path) -> None:
    journal = next(data.glob("runs/*/journal.msgpack"))
    with open(journal, "ab") as f:
        f.write(b"\x93\x01")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from world import LocalWorld; w = LocalWorld(sys.argv[1]); "
         "lease = w.acquire(sys.argv[2]); print('held', flush=True); sys.stdin.read()",
         str(data), journal.parent.name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        code, report = _doctor("--data", str(data), "--repair")
        lock = _by_path(report)[str(journal.with_name("owner.lock").relative_to(data))]
        assert lock["state"] == "held"
        busy = [r for r in report["repairs"] if r["state"] == "busy"]
        assert code == 0 and [r["path"] for r in busy] == [str(journal.relative_to(data))]
        assert journal.read_bytes().endswith(b"\x93\x01")  # untouched
    finally:
        holder.kill()
        holder.communicate()  # reaps it and closes its pipes
    code, report = _doctor("--data", str(data), "--repair")
    assert code == 0 and [r["state"] for r in report["repairs"]] == ["repaired"]


@pytest.mark.parametrize("where", ["missing", "file", "not-eve"])
def test_a_bad_data_path_is_one_line(isolated: Path, where: str) -> None:
    path = isolated / where
    if where == "file":
        path.write_text("x")
    elif where == "not-eve":
        (path / "stuff").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "eve_cli", "doctor", "--data", str(path)],
        capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )  # fmt: skip
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "--data" in lines[0], proc.stderr
    assert not path.exists() or where != "missing"  # doctor creates nothing
