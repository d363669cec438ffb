"""Damage to real journals: torn tails recovered, other damage located, nothing damaged read.

The journals come from real workflows (steps, hooks, a child run, continue-as-new) driven on a
`LocalWorld`. Hypothesis then truncates them and overwrites bytes at arbitrary offsets.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from world import CorruptJournalError, Engine, LocalWorld, WorkflowContext, _journal
from world.stores.local import verify as _verify


async def _session(ctx: WorkflowContext, state: dict[str, Any]) -> Any:
    hook = ctx.create_hook("t-corrupt") if state["n"] == 0 else ctx.hook("t-corrupt")
    message = await hook.receive()
    total = await ctx.step("add", lambda a, b: a + b, state["total"], message)
    await ctx.step("note", lambda: {"at": ctx.now(), "tags": {"x", "y"}, "raw": b"\x93\x01"})
    if state["n"] == 0:
        total += await ctx.run_child("child", message)
    if state["n"] == 2:
        return total
    ctx.continue_as_new({"n": state["n"] + 1, "total": total})


async def _child(ctx: WorkflowContext, n: int) -> int:
    return int(await ctx.step("double", lambda: 2 * n))


def _make_data(folder: Path) -> tuple[str, Path]:
    """A finished run family with a child, three generations and an inbox."""
    world = LocalWorld(folder)
    engine = Engine(world, {"session": _session, "child": _child})

    async def main() -> str:
        rid = await engine.start("session", {"n": 0, "total": 0})
        for value in (5, 7, 11):
            await engine.run(rid)
            await engine.resume_hook("t-corrupt", value)
            world.stream_append("events:corrupt", {"type": "delivered", "value": value})
        info = await engine.run(rid)
        assert info.status == "completed" and info.result == 5 + 10 + 7 + 11
        return rid

    rid = asyncio.run(main())
    world.close()
    return rid, folder / "runs" / rid / "journal.msgpack"


FILES = {
    "journal": "runs/{rid}/journal.msgpack",
    "inbox": "runs/{rid}/inbox.msgpack",
    "stream": "streams/events%3Acorrupt.msgpack",
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("pristine") / "data"
    rid, _ = _make_data(folder)
    return folder, rid


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    return _journal.read_file(str(path)).records


def _damaged_index(offsets: list[int], size: int, first_damage: int) -> int:
    """Index of the record holding byte `first_damage` (len(offsets) if past the end)."""
    for i, start in enumerate(offsets):
        end = offsets[i + 1] if i + 1 < len(offsets) else size
        if start <= first_damage < end:
            return i
    return len(offsets)


def test_the_real_journals_are_rich(pristine: tuple[Path, str]) -> None:
    folder, rid = pristine
    kinds = {rec["t"] for _, rec in _records(folder / "runs" / rid / "journal.msgpack")}
    assert {"header", "start", "step", "child", "gen", "done"} <= kinds
    assert len(_records(folder / "runs" / rid / "inbox.msgpack")) == 4  # header + 3 deliveries
    assert len(_records(folder / FILES["stream"])) == 4


damage = st.lists(
    st.tuples(st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=4)),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(sorted(FILES)),
    cut=st.one_of(st.none(), st.floats(0, 1, exclude_max=True)),
    edits=st.one_of(st.just([]), damage),
)
def test_damage_is_recovered_or_located_and_never_read_as_data(
    pristine: tuple[Path, str],
    tmp_path: Path,
    kind: str,
    cut: float | None,
    edits: list[tuple[float, bytes]],
) -> None:
    source, rid = pristine
    rel = FILES[kind].format(rid=rid)
    which = Path(rel).name
    original = (source / rel).read_bytes()
    records = _records(source / rel)
    offsets = [pos for pos, _ in records]

    data = bytearray(original)
    for where, patch in edits:
        at = int(where * len(data))
        data[at : at + len(patch)] = patch[: len(data) - at]
    changed = [i for i, (a, b) in enumerate(zip(data, original, strict=True)) if a != b]
    if cut is not None:
        data = data[: int(cut * len(data))]
    first = min([*changed, len(data)])
    broken = _damaged_index(offsets, len(original), first)
    intact = list(range(broken))  # records wholly before the first damaged or missing byte

    folder = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(source, folder)
    path = folder / rel
    path.write_bytes(bytes(data))

    try:
        result = _journal.read_file(str(path))
    except CorruptJournalError as err:
        # Damage that no write cut short explains: located exactly, at the first damaged record.
        assert err.file == str(path) and err.offset == offsets[broken]
        assert str(path) in str(err) and str(err.offset) in str(err)
        findings = {f.path: f for f in _verify.verify(folder)}
        assert findings[rel].state == "corrupt" and findings[rel].offset == offsets[broken]
    else:
        read = result.records
        assert read == records[: len(read)], "a damaged record was read as data"
        assert len(read) == len(intact)
        # Zero bytes after the last record are space a writer reserved, not a torn tail.
        assert result.torn == (result.end < len(data) and any(data[result.end :]))

    # Repair keeps every record it can read where it was, and every byte it replaces or cuts
    # in the quarantine folder: putting those back gives the damaged file again.
    done = _verify.repair(folder)
    assert all(f.state in ("repaired", "quarantined") for f in done if f.kind != "index")
    kept = sorted((folder / "quarantine").rglob("*")) if (folder / "quarantine").exists() else []
    if path.exists():
        after = _journal.read_file(str(path))
        assert not after.torn
        original_at = dict(records)
        for pos, rec in after.records[1:]:
            assert rec.get("t") == "gap" or rec == original_at.get(pos), "a record moved"
        ends = [*offsets[1:], len(original)]
        untouched = [
            pos
            for i, (pos, _) in enumerate(records)
            if not [c for c in changed if pos <= c < ends[i]] and ends[i] <= len(data)
        ]
        assert {pos for pos, _ in after.records} >= set(untouched[1:]), "a readable record lost"
        rebuilt = bytearray(path.read_bytes())
        for piece in kept:
            if piece.name.startswith(f"{which}.bytes-"):
                at = int(piece.name.rsplit("-", 1)[1])
                saved = piece.read_bytes()
                rebuilt[at : at + len(saved)] = saved
        tails = [p for p in kept if p.name.startswith(f"{which}.tail-")]
        rebuilt += tails[0].read_bytes() if tails else b""
        n = min(len(rebuilt), len(data))  # longer: a header took more than the bytes it replaced
        assert bytes(rebuilt[:n]) == bytes(data[:n]) and not any(data[n:])
        notes = (folder / "quarantine").rglob(_verify.NOTE) if kept else []
        assert all(rel in n.read_text() for n in notes)
    else:  # no readable run at all: the whole run folder is in quarantine
        assert kind == "journal"
        moved = [p for p in kept if p.name == which]
        assert moved and moved[0].read_bytes() == bytes(data)
    assert not [f for f in _verify.verify(folder) if f.state in ("corrupt", "unreadable")]


def test_a_torn_tail_is_recovered_by_the_engine(tmp_path: Path) -> None:
    rid, journal = _make_data(tmp_path / "data")
    data = journal.read_bytes()
    records = _records(journal)
    engine = Engine(LocalWorld(tmp_path / "data"), {"session": _session, "child": _child})
    intact = engine.history(rid)
    assert intact[-1]["t"] == "done" and records[-1][1]["t"] == "done"
    journal.write_bytes(data[: records[-1][0] + 3])  # the final `done` record half written
    history = engine.history(rid)
    assert [r["t"] for r in history][-1] != "done"
    assert history == intact[:-1]


def test_mid_journal_damage_stops_the_engine_with_file_and_offset(tmp_path: Path) -> None:
    rid, journal = _make_data(tmp_path / "data")
    records = _records(journal)
    data = bytearray(journal.read_bytes())
    data[records[3][0] + 6] ^= 0x40
    journal.write_bytes(bytes(data))
    engine = Engine(LocalWorld(tmp_path / "data"), {"session": _session, "child": _child})
    with pytest.raises(CorruptJournalError) as err:
        asyncio.run(engine.run(rid))
    assert err.value.offset == records[3][0] and err.value.file == str(journal)


async def _receiver(ctx: WorkflowContext, _: Any) -> list[Any]:
    hook = ctx.create_hook("t-inbox")
    first = await hook.receive()
    seen = await ctx.step("seen", lambda: first)
    return [seen, await hook.receive()]


@pytest.mark.parametrize("redelivered", [True, False])
def test_a_received_delivery_lost_from_the_inbox_is_an_error_not_another_payload(
    tmp_path: Path, redelivered: bool
) -> None:
    # A `recv` record names its deliveries by inbox position and checksum. A repair replaces
    # the damaged delivery by a gap record of its length, so a later delivery gets a new id
    # (never the lost one's): the replay must not go on without the one it received, but name
    # the inbox and the position.
    folder = tmp_path / "data"
    engine = Engine(LocalWorld(folder), {"receiver": _receiver})
    rid = asyncio.run(engine.start("receiver", run_id="rx"))
    asyncio.run(engine.run(rid))
    asyncio.run(engine.resume_hook("t-inbox", "first"))
    assert asyncio.run(engine.run(rid)).status == "parked"
    inbox = folder / "runs" / rid / "inbox.msgpack"
    [(position, item)] = _records(inbox)[1:]
    assert item["p"] == "first"  # inbox item version 2
    asyncio.run(engine.resume_hook("t-inbox", "second"))  # valid data after the damage
    data = bytearray(inbox.read_bytes())
    data[position + 12] ^= 0x01
    inbox.write_bytes(bytes(data))
    size = inbox.stat().st_size
    assert [f.state for f in _verify.repair(folder) if f.kind == "inbox"] == ["repaired"]
    assert inbox.stat().st_size == size and _records(inbox)[1] == (position, _records(inbox)[1][1])
    assert _records(inbox)[1][1]["t"] == "gap"  # in its place, of its length
    (folder / "runs" / rid / "head.msgpack").unlink()  # the next load reads from the start
    engine = Engine(LocalWorld(folder), {"receiver": _receiver})
    if redelivered:
        asyncio.run(engine.resume_hook("t-inbox", "other"))
        assert _records(inbox)[-1][0] == size  # a new id, after every earlier one
    with pytest.raises(CorruptJournalError) as err:
        asyncio.run(engine.run(rid))
    assert err.value.file == str(inbox) and err.value.offset == position
    assert f"{inbox}: the delivery at position {position}" in str(err.value)
    assert "missing or different" in str(err.value)
    # Reading the status and the history still works; the record says what it lost.
    assert engine.info(rid).status == "parked"
    [lost] = [r for r in engine.history(rid) if r["t"] == "recv"]
    assert lost["lost"] == position and "values" not in lost


@pytest.mark.parametrize("where", ["journal", "inbox"])
def test_a_family_damaged_before_where_a_load_begins_takes_no_writes(
    tmp_path: Path, where: str
) -> None:
    # The head lets a load skip to the current generation, so damage in an older one is never
    # read by the drive; still, neither the lease nor a delivery may write past it.
    folder = tmp_path / "data"
    engine = Engine(LocalWorld(folder), {"receiver": _receiver})
    rid = asyncio.run(engine.start("receiver", run_id="rx"))
    asyncio.run(engine.run(rid))
    asyncio.run(engine.resume_hook("t-inbox", "first"))
    assert asyncio.run(engine.run(rid)).status == "parked"
    path = folder / "runs" / rid / f"{where}.msgpack"
    offset = _records(path)[1][0]  # the first record after the header, valid ones after it
    data = bytearray(path.read_bytes())
    data[offset + 10] ^= 0x20
    path.write_bytes(bytes(data))
    engine = Engine(LocalWorld(folder), {"receiver": _receiver})  # a new process, as it were
    for attempt in (lambda: engine.run(rid), lambda: engine.resume_hook("t-inbox", "second")):
        with pytest.raises(CorruptJournalError) as err:
            asyncio.run(attempt())
        assert (err.value.file, err.value.offset) == (str(path), offset)
        assert f"run family {rid} takes no writes" in str(err.value) and err.value.repairable
        assert path.read_bytes() == bytes(data)  # nothing was written to it
    with pytest.raises(CorruptJournalError):
        engine.check(rid)  # what `eve inspect` asks says the same
