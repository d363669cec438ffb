"""What the store refuses (a full disk, damaged data) stops the drive with the store's own
error, naming the file; it never becomes a failed turn, and once the store is fixed the same
turn resumes and is answered."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eve_cli._session import history_stream
from eve_cli.runtime import Runtime
from tests.eve_cli.rt_support import AgentFactory, call, reply, side_effect_tool
from tests.power_cut import fill, small_disk
from world import STORAGE_ERRORS, CorruptJournalError, StorageError

__all__ = ["small_disk"]  # the fixture, used here

SCRIPT = [
    reply("first", call("record", text="a")),
    reply("first done"),
    reply("second " * 5000),  # ~35 KB of deltas: new space on the disk
    reply("spare"),
]


def test_a_full_disk_stops_the_drive_and_the_turn_resumes_once_there_is_space(
    small_disk: Path, tmp_path: Path, make_agent: AgentFactory
) -> None:
    agent = make_agent(script=SCRIPT, tools={"rec": side_effect_tool(tmp_path / "log")})
    rt = Runtime(data_dir=small_disk / "data", agent_dir=agent)

    async def main() -> None:
        sid = await rt.create_session()
        await rt.deliver(sid, "one")
        await rt.drive(sid)
        await rt.deliver(sid, "two")
        filler = fill(small_disk)
        try:
            await rt.drive(sid)
        except StorageError as exc:
            message = str(exc)
            assert str(small_disk / "data") in message and "no space left on" in message.lower()
            assert "nothing stored before was lost" in message
        else:
            raise AssertionError("the drive went on with a full disk")
        assert not [e for e in rt.events(sid) if e["type"] in ("turn.failed", "step.failed")]
        filler.unlink()
        again = Runtime(data_dir=small_disk / "data", agent_dir=agent)
        view = await again.drive(sid)
        assert [t["status"] for t in view["turns"]] == ["completed", "completed"]
        assert view["turns"][1]["steps"][-1]["text"] == "second " * 5000
        again.close()

    asyncio.run(main())
    rt.close()


def test_damaged_history_stops_the_drive_instead_of_failing_the_turn(
    tmp_path: Path, make_agent: AgentFactory
) -> None:
    agent = make_agent(script=SCRIPT, tools={"rec": side_effect_tool(tmp_path / "log")})
    data = tmp_path / "data"
    rt = Runtime(data_dir=data, agent_dir=agent)

    async def main() -> str:
        sid = await rt.create_session()
        await rt.deliver(sid, "one")
        await rt.drive(sid)
        await rt.deliver(sid, "two")
        return sid

    sid = asyncio.run(main())
    rt.close()
    stream = data / "streams" / f"{history_stream(sid)}.msgpack"
    raw = bytearray(stream.read_bytes())
    middle = raw.index(b"recorded a")  # inside the tool result, valid items after it
    raw[middle : middle + 10] = b"RECORDED A"
    stream.write_bytes(bytes(raw))
    (data / "streams" / f"{history_stream(sid)}.idx").unlink()
    again = Runtime(data_dir=data, agent_dir=agent)
    try:
        asyncio.run(again.drive(sid))
    except STORAGE_ERRORS as exc:
        assert isinstance(exc, CorruptJournalError) and str(stream) in str(exc)
    else:
        raise AssertionError("the drive went on over damaged history")
    failed = ("turn.failed", "step.failed")
    assert not [e for e in again.events(sid, texts=False) if e["type"] in failed]
    again.close()
