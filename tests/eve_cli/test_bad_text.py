"""Text that is not valid Unicode (a lone surrogate) at every entry point of a session: the
facade refuses it before anything is stored; what a model or a tool produced is repaired
(U+FFFD, one warning) and the turn goes on. The HTTP channel (`test_channel_hostile`), the
command line (`test_cli_chat_edges`) and MCP (`mcp_tests/test_mcp_hostile`) are tested as
real processes."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from eve_cli._text import bad_text, repair
from eve_cli.runtime import Runtime
from eve_cli.testing import call, reply
from tests.eve_cli.rt_support import DANGER_TOOL, tool_file, write_agent
from world import SerializationError
from world._codec import encode

BAD = "a\ud800b"
FIXED = "a\ufffdb"
BAD_TOOL = tool_file(
    '''
    notes = define_state("notes", "")

    @tool
    def bad(x: str) -> str:
        """Returns broken text, and keeps some in the session's state."""
        notes.update(lambda _: "n\\udfff")
        return "r\\ud800s " + x
    '''
)


def _run(agent: Path, data: Path, message: str = "hi") -> tuple[Runtime, str, Any]:
    async def main() -> tuple[Runtime, str, Any]:
        rt = Runtime(data, agent_dir=agent)
        sid = await rt.create_session()
        receipt = await rt.deliver(sid, message)
        assert receipt.disposition == "started", receipt
        return rt, sid, await rt.drive(sid)

    return asyncio.run(main())


def test_the_codec_names_a_lone_surrogate() -> None:
    with pytest.raises(SerializationError) as caught:
        encode({"text": [BAD]}, "payload")
    assert str(caught.value) == (
        "cannot serialize payload['text'][0]: text that is not valid Unicode "
        "(a lone surrogate U+D800 at character 1)"
    )


def test_repair_keeps_length_and_shape() -> None:
    value = {"k\udc80": [BAD, ("x", 1)], "ok": b"\xff", "n": None}
    fixed, changed = repair(value)
    assert changed == 2
    assert fixed == {"k\ufffd": [FIXED, ("x", 1)], "ok": b"\xff", "n": None}
    assert repair(["fine", {"a": 1}])[1] == 0
    assert bad_text({"inputResponses": [{"answer": BAD}]}) == (
        "inputResponses[0].answer is not valid Unicode: a lone surrogate U+D800 at character 1 "
        "(text must be UTF-8)"
    )


def test_the_facade_refuses_bad_text_and_stores_nothing(tmp_path: Path) -> None:
    agent = write_agent(tmp_path / "agent", script=[reply("", call("danger", x=1))],
                        tools={"danger": DANGER_TOOL})  # fmt: skip

    async def main() -> None:
        rt = Runtime(tmp_path / "data", agent_dir=agent)
        with pytest.raises(ValueError, match=r"the task is not valid Unicode"):
            await rt.create_session(task=BAD)
        with pytest.raises(ValueError, match=r"meta\.note is not valid Unicode"):
            await rt.create_session(meta={"note": BAD})
        assert rt.sessions() == []  # no empty session left behind
        sid = await rt.create_session()
        receipt = await rt.deliver(sid, BAD)
        assert receipt.disposition == "rejected"
        assert receipt.reason and "the message is not valid Unicode" in receipt.reason
        assert (await rt.deliver(sid, "go")).disposition == "started"
        assert (await rt.drive(sid))["status"] == "parked"
        [pending] = rt.session(sid)["pending"]
        answer = [{"requestId": pending["requestId"], "approved": True, "x": BAD}]
        refused = await rt.respond(sid, answer)
        assert refused.disposition == "rejected" and "responses[0].x" in (refused.reason or "")
        assert [e["type"] for e in rt.events(sid)].count("message.received") == 1
        rt.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("script", "where"),
    [
        ([reply(BAD)], "reply"),
        ([reply("", call("bad", x="1")), reply("done")], "tool"),
        ([reply("", call("bad", x=BAD)), reply("done")], "arguments"),
    ],
)
def test_model_and_tool_text_is_repaired_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, script: list[dict[str, Any]], where: str
) -> None:
    agent = write_agent(tmp_path / "agent", script=script, tools={"bad": BAD_TOOL})
    with caplog.at_level(logging.WARNING, logger="eve_cli"):
        rt, sid, out = _run(agent, tmp_path / "data")
    assert out["status"] == "waiting"
    events = rt.events(sid)
    assert [e["type"] for e in events if e["type"].startswith("turn.")] == [
        "turn.started", "turn.completed"
    ]  # fmt: skip
    text = repr(events)
    assert "\\ud800" not in text and "\ufffd" in text, [e for e in events if "\\ud800" in repr(e)]
    source = "tool 'bad'" if where == "tool" else "model scripted:"
    warnings = [r.getMessage() for r in caplog.records if "not valid Unicode" in r.getMessage()]
    assert source in warnings[0], warnings  # the tool's own text too, after the arguments
    assert len(warnings) == (2 if where == "arguments" else 1), warnings
    if where == "reply":
        assert [e["text"] for e in events if e["type"] == "message.completed"] == [FIXED]
        assert rt.history(sid)[-1]["content"] == FIXED
    if where == "tool":
        [result] = [e for e in events if e["type"] == "action.result"]
        assert result["output"] == "r\ufffds 1"
    rt.close()
