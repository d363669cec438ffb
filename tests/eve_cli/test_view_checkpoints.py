"""The session fold is checkpointed with the session (issue 33): a process that has not read a
session starts its view from the latest checkpoint and folds only the events after it, and the
view it gives is the one a fold of every stored event gives, on every World."""

from __future__ import annotations

import asyncio
import copy
import itertools
from pathlib import Path
from typing import Any

import pytest

from eve_cli._session import events_stream
from eve_cli.execution import _view, fold
from eve_cli.execution._view import checkpoint_stream
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import DANGER_TOOL, call, first_args, reply, write_agent
from tests.worlds import WorldOpener

ADDED = ("agent", "mode", "model", "agentDir", "forkedFrom", "forks", "turnCount", "turnsFrom")


def _folded(view: Any) -> dict[str, Any]:
    return {k: v for k, v in copy.deepcopy(view).items() if k not in ADDED}


def _script() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(30):
        out += [call("danger", x=n), reply(f"done {n}")] if n % 3 == 1 else [reply(f"r{n}")]
    return out


@pytest.fixture
def every(monkeypatch: pytest.MonkeyPatch) -> int:
    """Checkpoints every few events, so a short session has several."""
    monkeypatch.setattr(_view, "EVERY", 6)
    return 6


def test_a_view_from_checkpoints_is_a_fold_of_every_event(
    open_world: WorldOpener, tmp_path: Path, every: int
) -> None:
    agent = write_agent(tmp_path / "agent", script=_script(), tools={"danger": DANGER_TOOL})

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session()
        for n in range(8):
            await rt.deliver(sid, f"message {n}")
            # The writer's fold kept (its view read), or not.
            view = await rt.drive(sid) if n % 2 else await rt.drive(sid, view=False)
            if view["status"] == "parked":
                [asked] = rt.session(sid)["pending"]
                await rt.respond(sid, [{"requestId": asked["requestId"], "approved": n % 4 == 1}])
                await rt.drive(sid)
            if n == 5:
                await rt.deliver(sid, "steered in", "steer")
                await rt.compact(sid)
                await rt.drive(sid)
            # Another process, which has read nothing of the session yet.
            other = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
            try:
                events = other.events(sid)
                fresh = _folded(fold(sid, events))
                first = other.session(sid, None)  # from the checkpoints, as decoded
                assert _folded(first) == fresh
                assert first["turnCount"] == len(fresh["turns"]) and first["turnsFrom"] == 1
                first["turns"].clear()  # the caller's: nothing kept changes
                again = other.session(sid, None)  # its older turns now kept, shared read-only
                assert _folded(again) == fresh == _folded(other.session(sid, None))
                if len(again["turns"]) > 1:
                    with pytest.raises(TypeError, match="read-only"):
                        again["turns"][0]["status"] = "changed"
                for reading in (other, rt):  # pages: a fresh process's and the writer's
                    _pages_agree(reading, sid, fresh)
            finally:
                other.close()
        records = rt.world.stream_read(checkpoint_stream(sid))
        assert len(records) >= 3  # checkpointed as it grew, each at a turn's end
        assert all(r["events"] - q["events"] >= every for q, r in itertools.pairwise(records))
        rt.close()

    asyncio.run(main())


def _pages_agree(rt: Runtime, sid: str, fresh: dict[str, Any]) -> None:
    """Every page of the session's turns is the fold's, with the marks of its turns."""
    total = len(fresh["turns"])
    for size in (1, 2, 3, None):
        latest = rt.session(sid, size)
        start = 1 if size is None else max(1, total - size + 1)
        assert latest["turnCount"] == total and latest["turnsFrom"] == start
        assert latest["turns"] == fresh["turns"][start - 1 :]
        for first in range(1, total + 2):
            page = rt.session(sid, size, first)
            end = total if size is None else min(total, first + size - 1)
            assert page["turnsFrom"] == first
            assert page["turns"] == fresh["turns"][first - 1 : end]
            low = first if first > 1 else 0
            assert page["marks"] == [m for m in fresh["marks"] if low <= m["turn"] <= end]
            assert _folded({**page, "turns": [], "marks": []}) == _folded(
                {**fresh, "turns": [], "marks": []}
            )


def test_a_checkpoint_that_does_not_match_the_events_is_not_read(
    open_world: WorldOpener, tmp_path: Path, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another fold's version, or events that are no longer those it took: folded afresh."""
    agent = write_agent(tmp_path / "agent", script=[reply(f"r{n}") for n in range(10)])

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session()
        for n in range(4):
            await rt.deliver(sid, f"m{n}")
            await rt.drive(sid)
        fresh = _folded(fold(sid, rt.events(sid)))
        name = checkpoint_stream(sid)
        [*_, latest] = rt.world.stream_read(name)
        # A fold of a newer version ignores it.
        monkeypatch.setattr(_view, "FOLD_VERSION", latest["fold"] + 1)
        other = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
        assert _folded(other.session(sid, None)) == fresh
        other.close()
        monkeypatch.setattr(_view, "FOLD_VERSION", latest["fold"])
        # One whose last event is not the stored one (its state says something else), one
        # that cannot be read: the view is folded afresh; the next turn's end starts afresh.
        for wrong in (dict(latest, last={"not": "the stored event"}), dict(latest, data=b"?")):
            rt.world.stream_append(name, wrong)
            other = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
            assert _folded(other.session(sid, None)) == fresh
            other.close()
        before = len(rt.world.stream_read(name))
        writer = Runtime(agent_dir=agent, world=open_world())
        for n in range(2):
            await writer.deliver(sid, f"after {n}")
            await writer.drive(sid, view=False)
        [first, *_] = rt.world.stream_read(name)[before:]
        state = _view._decoded(first)
        assert state is not None and state["from"] == 0  # from scratch: all turns again
        other = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
        assert _folded(other.session(sid, None)) == _folded(fold(sid, rt.events(sid)))
        other.close()
        writer.close()
        rt.close()

    asyncio.run(main())


def _digesting(agent: Path, open_world: WorldOpener) -> Runtime:
    """A runtime on a new world of `open_world`'s, which must give stream digests (a world
    without them folds afresh every time: nothing kept to test)."""
    rt = Runtime(agent_dir=agent, world=open_world())
    if rt.world.stream_digest(events_stream("s_1"), 0) is None:
        rt.close()
        pytest.skip("a world without digests folds afresh every time")
    return rt


def _texts_read(monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """The history items whose texts views read back, a set per read (appended as they are)."""
    read: list[set[int]] = []
    real = _view._messages

    def messages(reader: Any, refs: set[int]) -> dict[int, str]:
        read.append(refs)
        return real(reader, refs)

    monkeypatch.setattr(_view, "_messages", messages)
    return read


def test_the_writers_view_after_a_checkpoint_reads_no_turn_back(
    open_world: WorldOpener, tmp_path: Path, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process that checkpoints a session keeps the turns it lets go as the record holds
    them, texts and all: its views of them read no text back (a drive's view included)."""
    agent = write_agent(tmp_path / "agent", script=[reply(f"reply {n}") for n in range(12)])
    read = _texts_read(monkeypatch)  # the history items whose texts a view read back

    async def main() -> None:
        rt = _digesting(agent, open_world)
        sid = await rt.create_session()
        for n in range(6):
            await rt.deliver(sid, f"message {n}")
            view = await rt.drive(sid)
            assert [t["input"] for t in view["turns"]] == [f"message {i}" for i in range(n + 1)]
            view = rt.session(sid, None)
            assert [t["input"] for t in view["turns"]] == [f"message {i}" for i in range(n + 1)]
            if n == 0:
                read.clear()  # (a first view may start from a checkpoint: its first message)
        assert len(rt.world.stream_read(checkpoint_stream(sid))) >= 3
        assert read == []
        other = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
        assert _folded(rt.session(sid, None)) == _folded(other.session(sid, None))
        other.close()
        assert read  # (the other process read them)
        rt.close()

    asyncio.run(main())


def test_the_writer_does_not_decode_the_checkpoint_it_wrote_to_write_the_next(
    open_world: WorldOpener, tmp_path: Path, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process whose kept fold wrote the latest checkpoint writes the next one after it
    without decoding it (it holds that state); one whose latest is another's decodes it, and
    the records either writes give the view a fold of every event gives."""
    agent = write_agent(tmp_path / "agent", script=[reply(f"reply {n}") for n in range(12)])
    decoded = first_args(monkeypatch, _view, "_decoded")

    async def main() -> None:
        rt = _digesting(agent, open_world)
        sid = await rt.create_session()
        for n in range(6):
            await rt.deliver(sid, f"message {n}")
            await rt.drive(sid)
            if n == 1:  # (the first views restore the fold from a checkpoint: decoded)
                decoded.clear()
                first = len(rt.world.stream_read(checkpoint_stream(sid)))
        records = rt.world.stream_read(checkpoint_stream(sid))
        assert len(records) >= first + 2 and decoded == []
        assert [r["since"] for r in records][1:] == [r["turns"] - 1 for r in records][:-1]
        rt.close()
        other = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
        await other.deliver(sid, "message 6")
        await other.drive(sid)
        assert decoded  # the latest is not one it wrote: it reads it
        count = len(other.world.stream_read(checkpoint_stream(sid)))
        assert count > len(records)
        stored = other.world.stream_read(events_stream(sid))
        fresh = fold(sid, other.core.reader(sid).read(0, stored))
        assert _folded(other.session(sid, None))["turns"] == fresh["turns"]
        other.close()

    asyncio.run(main())


def test_a_page_needing_more_records_than_kept_decodes_each_once(
    open_world: WorldOpener, tmp_path: Path, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page whose turns span more checkpoint records than a kept fold keeps by default
    keeps them all: its views decode no record again, in the writer and in another process
    (records kept least recently used were each let go just before the next page read it)."""
    monkeypatch.setattr(_view, "_RECORDS_KEPT", 2)
    agent = write_agent(tmp_path / "agent", script=[reply(f"reply {n}") for n in range(12)])
    read = _texts_read(monkeypatch)  # one entry per record (or turn) whose texts were read

    async def main() -> None:
        rt = _digesting(agent, open_world)
        sid = await rt.create_session()
        for n in range(9):
            await rt.deliver(sid, f"message {n}")
            if n == 1:
                read.clear()  # (a first view may start from a checkpoint: its first message)
            view = await rt.drive(sid)
            assert [t["input"] for t in view["turns"]] == [f"message {i}" for i in range(n + 1)]
        assert len(rt.world.stream_read(checkpoint_stream(sid))) >= 6
        assert read == []
        other = Runtime(agent_dir=agent, world=open_world(), load_agent=False)
        views, decoded = [], []
        for _ in range(3):
            before = len(read)
            views.append(other.session(sid, None))
            decoded.append(len(read) - before)
        assert decoded[0] >= 6  # the other process decodes them once (a third view: none)
        assert decoded[2] == 0
        # A page of every turn walks every record: it keeps no more than a default page's.
        monkeypatch.setattr(_view, "PAGE", 3)
        other.session(sid, None, 1)
        assert len(other.core.views._folds[sid].older) <= 3 + 2
        assert _folded(views[2]) == _folded(rt.session(sid, None))
        other.close()
        rt.close()

    asyncio.run(main())
