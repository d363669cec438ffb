"""The example data continued twice: a later process appends records of the one current form
to it and reads the whole of it back, old records and new alike."""

from __future__ import annotations

import shutil
from pathlib import Path

from eve_cli.harness._input import expand_delivery
from tests.eve_cli.cli.cli_helpers import Eve
from world import Engine, LocalWorld, _journal

EXAMPLE = Path(__file__).resolve().parents[3] / ".workflow-data.example"


def test_the_example_goes_on_in_its_one_form(eve: Eve, tmp_path: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(EXAMPLE, copy)
    [sid] = [p.name for p in (copy / "runs").iterdir()]
    journal = copy / "runs" / sid / "journal.msgpack"
    old = _journal.read_file(str(journal)).records
    assert old[0][1]["version"] == _journal.JOURNAL_VERSION
    for words, count in (("a b c d", 4), ("x y", 2)):
        result = eve("chat", "--data", str(copy), "-c", "-p", f"count the words in {words}")
        assert result.exit_code == 0, result.output
        assert result.stdout == f"That text has {count} words.\n"
    records = _journal.read_file(str(journal)).records
    assert records[: len(old)] == old  # appended to, never rewritten
    stored = [rec for _, rec in records[1:]]
    assert stored and not any("run" in rec for rec in stored)  # every record compact
    history = Engine(LocalWorld(copy), {}).history(sid)
    assert all({"run", "g", "t", "at"} <= set(rec) for rec in history)
    gens = [rec["input"] for rec in history if rec["t"] == "gen"]
    assert gens[-1]["v"] == 3 and "k" not in gens[-1], gens[-1]  # constants left to the meta
    received = [rec["values"] for rec in history if rec["t"] == "recv"]
    assert received[-1] == [{"m": "count the words in x y"}]  # a delivery, compact
    texts = [expand_delivery(v[0]).get("text") for v in received if isinstance(v[0], dict)]
    assert texts[-2:] == ["count the words in a b c d", "count the words in x y"]


def test_the_example_packs_back_to_its_own_bytes(tmp_path: Path) -> None:
    """Every record of the example read whole and stored again in the current form (what a
    migration does, here to a store relabelled format 1) gives its bytes exactly: the stored
    form is the one the example was written in."""
    copy = tmp_path / "data"
    shutil.copytree(EXAMPLE, copy)
    (copy / "FORMAT").write_text('{"format": "eve-world", "version": 1}\n')
    world = LocalWorld(copy)
    assert world.migration is not None and world.migration.records > 40
    world.close()
    [sid] = [p.name for p in (copy / "runs").iterdir()]
    for name in ("journal.msgpack", "inbox.msgpack"):
        kept = (EXAMPLE / "runs" / sid / name).read_bytes()
        assert (copy / "runs" / sid / name).read_bytes() == kept, name
