"""What a drive asks the world around its steps, on a real PostgresWorld (every statement a
round trip): a session seen before is not looked up again at each use, and its view after the
drive reads no more than the events' digests and what was appended since."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from eve_cli.runtime import Runtime, SessionNotFoundError
from tests.eve_cli.rt_support import DANGER_TOOL, AgentFactory, call, reply
from tests.pg_support import fresh_schema
from tests.worlds import WorldOpener


class _Statements:
    """Counts the world's statements by name while ``on`` (``streams``: those naming a
    stream, by statement and stream kind: ``events``, ``history``)."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.seen: collections.Counter[str] = collections.Counter()
        self.streams: collections.Counter[tuple[str, str]] = collections.Counter()
        self.on = False


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


def _counting(monkeypatch: pytest.MonkeyPatch, sql: dict[str, Any]) -> _Statements:
    counted = _Statements({str(text): name for name, text in sql.items()})
    execute = psycopg.Connection.execute

    def counting(conn: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if counted.on:
            name = counted.names.get(str(query), str(query)[:40])
            counted.seen[name] += 1
            params = args[0] if args else None
            if isinstance(params, dict) and isinstance(params.get("name"), str):
                counted.streams[name, params["name"].split(".", 1)[0]] += 1
        return execute(conn, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    return counted


def test_a_drive_looks_its_session_up_once(
    make_agent: AgentFactory, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from world import PostgresWorld

    agent = make_agent(script=[reply("one"), reply("two"), reply("three")])
    world = PostgresWorld(postgres_url)
    counted = _counting(monkeypatch, world._sql)

    delivered: collections.Counter[str] = collections.Counter()

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=world)
        sid = await rt.create_session()
        for text in ("a", "b", "c"):
            counted.on = text != "a"  # the first drive reads what this process has not seen
            drives, streams = counted.seen, counted.streams
            counted.seen, counted.streams = delivered, collections.Counter()
            receipt = await rt.deliver(sid, text)
            counted.seen, counted.streams = drives, streams
            assert receipt.disposition == "started"
            view = await rt.drive(sid)
            counted.on = False
            assert view["turns"][-1]["status"] == "completed" and view["agent"] == agent.name

    try:
        asyncio.run(main())
    finally:
        world.close()
    seen = counted.seen
    # Two drives: the engine's own look at the family before it takes it, and nothing else
    # asks whether the family is there (the drive, its head's note and its view did, each).
    assert seen["family"] == 2, seen
    # The view after the drive reads the events appended since without asking their number.
    assert seen["stream_length"] == 0, seen
    # Nor does it read them: the drive's last head write made it, under the drive's lease,
    # from the fold the turn fed; their digest is the one read of them, a statement each
    # (the stream's row with the items after the digest known: two a drive).
    events = {what: n for (what, kind), n in counted.streams.items() if kind == "events"}
    assert events == {"stream_digest": 4}, counted.streams
    # A delivery looks the session up once (its status, the events' length before it and its
    # hook's token from that look), then asks the events' length once more for its receipt;
    # its head is read twice (`heads(roots=)`: the runtime's look and the mark it reads), the
    # hook owner's once by the engine: as many queries as before `read_head` and
    # `family_exists` left the port.
    assert delivered["family"] == 0 and delivered["stream_length"] == 4, delivered
    assert delivered["heads_of"] == 4 and delivered["read_head"] == 2, delivered


def test_a_drive_of_a_session_removed_since_it_was_seen(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    agent = make_agent(script=[reply("one"), reply("two")])

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session()
        await rt.deliver(sid, "a")
        await rt.drive(sid)
        assert open_world().remove_family(sid)  # `eve gc` in another process
        with pytest.raises(SessionNotFoundError):
            await rt.drive(sid)
        with pytest.raises(SessionNotFoundError):
            rt.session(sid)

    asyncio.run(main())


def test_what_a_drive_returns_is_its_sessions_state_then(
    make_agent: AgentFactory, open_world: WorldOpener
) -> None:
    """A drive's view (made while its last head is written) is the view read afterwards; its
    status too (``view=False``); a turn another process drives in between is in both."""
    agent = make_agent(
        script=[
            reply("one"),
            reply("", call("danger", x=1)),
            reply("two"),
            reply("three"),
            reply("four"),
        ],
        tools={"danger": DANGER_TOOL},
    )

    async def main() -> None:
        rt = Runtime(agent_dir=agent, world=open_world())
        other = Runtime(agent_dir=agent, world=open_world())
        sid = await rt.create_session()
        await rt.deliver(sid, "a")
        view = await rt.drive(sid)
        assert view["status"] == "waiting" and view == rt.session(sid)
        await rt.deliver(sid, "b")
        assert await rt.drive(sid, view=False) == {"id": sid, "status": "parked"}
        view = rt.session(sid)
        [request] = view["pending"]
        await other.respond(sid, [{"requestId": request["requestId"], "approved": True}])
        await other.drive(sid)  # another process's turn: this one's kept fold is behind
        assert [t["status"] for t in rt.session(sid)["turns"]] == ["completed", "completed"]
        await other.deliver(sid, "c")
        await other.drive(sid)
        await rt.deliver(sid, "d")
        view = await rt.drive(sid)
        assert [t["input"] for t in view["turns"]] == ["a", "b", "c", "d"]
        assert view == rt.session(sid) == other.session(sid)
        assert view["turns"][-1]["steps"][-1]["text"] == "four"
        other.close()
        rt.close()

    asyncio.run(main())
