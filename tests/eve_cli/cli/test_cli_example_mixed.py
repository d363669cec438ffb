"""The example data (journal version 1) continued twice: a version-1 file going on with
version-2 records is read whole by a later process, old records and new alike."""

from __future__ import annotations

import shutil
from pathlib import Path

from eve_cli.harness._input import expand_delivery
from tests.eve_cli.cli.cli_helpers import Eve
from world import Engine, LocalWorld, _journal

EXAMPLE = Path(__file__).resolve().parents[3] / ".workflow-data.example"


def test_a_version_1_journal_goes_on_with_version_2_records(eve: Eve, tmp_path: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(EXAMPLE, copy)
    [sid] = [p.name for p in (copy / "runs").iterdir()]
    journal = copy / "runs" / sid / "journal.msgpack"
    old = _journal.read_file(str(journal)).records
    assert old[0][1]["version"] == 1 and all("run" in rec for _, rec in old[1:])
    for words, count in (("a b c d", 4), ("x y", 2)):
        result = eve("chat", "--data", str(copy), "-c", "-p", f"count the words in {words}")
        assert result.exit_code == 0, result.output
        assert result.stdout == f"That text has {count} words.\n"
    records = _journal.read_file(str(journal)).records
    assert records[: len(old)] == old  # appended to, never rewritten
    new = [rec for _, rec in records[len(old) :]]
    assert new and not any("run" in rec for rec in new)  # version 2: compact
    history = Engine(LocalWorld(copy), {}).history(sid)
    assert all({"run", "g", "t", "at"} <= set(rec) for rec in history)
    # The old session goes on with version-3 snapshots: its constants (from the run's meta)
    # are left out, and the next process read them back (the second chat answered).
    gens = [rec["input"] for rec in history if rec["t"] == "gen"]
    assert gens[-1]["v"] == 3 and "k" not in gens[-1], gens[-1]
    assert any(rec["input"].get("v", 1) < 3 for rec in history if rec["t"] in ("start", "gen"))
    received = [rec["values"] for rec in history if rec["t"] == "recv"]
    # Old deliveries are whole, new ones compact ({"m": text}): both read the same.
    texts = [expand_delivery(v[0]).get("text") for v in received if isinstance(v[0], dict)]
    assert received[-1] == [{"m": "count the words in x y"}]
    assert texts[-2:] == ["count the words in a b c d", "count the words in x y"]
