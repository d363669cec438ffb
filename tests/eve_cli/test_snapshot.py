"""The persisted snapshot: short stored names (version 2), version-1 data still reads, and a
turn's changes applied to the snapshot it started from give the snapshot it ended with."""

from __future__ import annotations

from dataclasses import fields

import pytest

from eve_cli._session import CODES, SNAPSHOT_VERSION, Snapshot


def test_every_field_has_a_distinct_stored_name() -> None:
    assert set(CODES) == {f.name for f in fields(Snapshot)}
    assert len(set(CODES.values())) == len(CODES)


def test_round_trip_leaves_out_the_id_and_keeps_everything_else() -> None:
    snap = Snapshot(id="s_1", token="tok", turns=3, history_len=7, summary_at=5,
                    pending=[{"requestId": "r"}], state={"n": 1})  # fmt: skip
    data = snap.to_data()
    assert data["v"] == SNAPSHOT_VERSION == 2
    assert "id" not in data and "s_1" not in data.values()
    assert Snapshot.from_data(data, "s_1") == snap


def test_a_version_1_snapshot_reads_with_its_inline_summary() -> None:
    old = {"id": "s_1", "token": "tok", "turns": 4, "history_start": 2, "history_len": 9,
           "summary": "earlier", "v": 1}  # fmt: skip
    snap = Snapshot.from_data(old, "ignored")
    assert (snap.id, snap.turns, snap.history_start, snap.summary) == ("s_1", 4, 2, "earlier")
    assert snap.summary_at is None


def test_a_newer_version_is_refused() -> None:
    with pytest.raises(ValueError, match="newer than this eve"):
        Snapshot.from_data({"v": SNAPSHOT_VERSION + 1})


def test_changes_applied_to_the_start_give_the_end() -> None:
    start = Snapshot(id="s_1", token="tok", turns=1, pending=[{"requestId": "r"}], task="x")
    end = start.copy()
    end.turns, end.pending, end.task, end.queued = 2, [], None, [{"kind": "message"}]
    changes = end.changes_since(start)
    assert set(changes) == {"t", "p", "tk", "q"}  # only what changed, by stored name
    assert start.patched(changes) == end
    assert start.patched({}) == start
