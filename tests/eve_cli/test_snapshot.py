"""The persisted snapshot: short stored names, only what differs from a base the reader has
(version 3, the one form; other versions refused), and a turn's changes applied to the
snapshot it started from give the snapshot it ended with."""

from __future__ import annotations

from dataclasses import fields
from typing import cast

import pytest

from eve_cli._session import (
    CODES,
    SNAPSHOT_VERSION,
    PendingRequest,
    Snapshot,
    SnapshotData,
    session_base,
)


def test_every_field_has_a_distinct_stored_name() -> None:
    assert set(CODES) == {f.name for f in fields(Snapshot)}
    assert len(set(CODES.values())) == len(CODES)


def test_round_trip_leaves_out_the_id_and_keeps_everything_else() -> None:
    snap = Snapshot(id="s_1", token="tok", turns=3, history_len=7, summary_at=5,
                    pending=[{"requestId": "r", "kind": "approval"}], state={"n": 1})  # fmt: skip
    data = snap.to_data()
    assert data["v"] == SNAPSHOT_VERSION == 3
    assert "id" not in data and "s_1" not in data.values()
    assert Snapshot.from_data(data, "s_1") == snap


def test_a_pre_release_version_is_refused() -> None:
    old = {"id": "s_1", "token": "tok", "turns": 4, "summary": "earlier", "v": 1}
    for data in (old, {"k": "tok", "t": 2, "v": 2}, {"k": "tok"}):  # no "v": version 1
        with pytest.raises(ValueError, match="pre-release form this eve does not read"):
            Snapshot.from_data(cast(SnapshotData, data), "s_1")


def test_a_newer_version_is_refused() -> None:
    with pytest.raises(ValueError, match="newer than this eve"):
        Snapshot.from_data({"v": SNAPSHOT_VERSION + 1})


def test_changes_applied_to_the_start_give_the_end() -> None:
    start = Snapshot(
        id="s_1", token="tok", turns=1, pending=[{"requestId": "r", "kind": "approval"}], task="x"
    )
    end = start.copy()
    end.turns, end.pending, end.task, end.queued = 2, [], None, [{"kind": "message"}]
    changes = end.changes_since(start)
    assert set(changes) == {"t", "p", "tk", "q"}  # only what changed, by stored name
    assert start.patched(changes) == end
    assert start.patched({}) == start


def test_version_3_leaves_out_what_the_base_holds() -> None:
    meta = {"token": "t" * 32, "agentDir": "/agents/a", "model": None, "mode": "conversation",
            "created": 1700000000.25}  # fmt: skip
    base = session_base(meta)
    request: PendingRequest = {"requestId": "r", "kind": "approval"}
    snap = Snapshot(id="s_1", token="t" * 32, agent_dir="/agents/a", created_at=1700000000.25,
                    turns=4, history_len=8, pending=[request])  # fmt: skip
    data = snap.to_data(base)
    assert data == {"t": 4, "hl": 8, "p": [{"requestId": "r", "kind": "approval"}], "v": 3}
    assert Snapshot.from_data(data, "s_1", base) == snap
    # A field back at its default while the base has another value is stored (a task
    # session in the family of a conversation: no token of its own).
    task = Snapshot(id="s_1.0.0", mode="task", task="do it", created_at=1.0)
    assert task.to_data(base)["k"] is None
    assert Snapshot.from_data(task.to_data(base), "s_1.0.0", base) == task
    # A turn's input against the snapshot its driver's generation began with.
    after = snap.copy()
    after.history_len += 1
    assert after.to_data(snap) == {"hl": 9, "v": 3}
    assert Snapshot.from_data(after.to_data(snap), "s_1", snap) == after


def test_a_copy_shares_nothing_changeable() -> None:
    snap = Snapshot(id="s", state={"a": [1]}, pending=[], queued=[{"text": "1"}])
    copied = snap.copy()
    assert copied == snap
    copied.pending.append({"requestId": "x", "kind": "question"})
    values = copied.state["a"]
    assert isinstance(values, list)
    values.append(2)
    copied.queued[0]["text"] = "2"
    copied.approved_tools.append("t")
    assert snap == Snapshot(id="s", state={"a": [1]}, pending=[], queued=[{"text": "1"}])
