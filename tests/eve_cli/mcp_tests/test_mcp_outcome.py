"""`agent_respond` over MCP answers an interrupted call's "outcome unknown" request, as the
HTTP channel and `eve chat` do (a real `eve mcp` process, the SDK's real client)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from mcp import Client

from tests.eve_cli.effects_support import parked_case
from tests.eve_cli.mcp_tests.test_mcp_serve import eve_mcp, refused, use


def test_an_outcome_given_over_mcp_becomes_the_call_s_result(tmp_path: Path) -> None:
    data = os.environ["EVE_DATA_DIR"]
    case = parked_case(tmp_path / "case", data, amount=2)

    async def main() -> None:
        async with Client(eve_mcp(case.agent, data), cache=None) as client:
            got = await use(client, "agent_get", sessionId=case.sid)
            [request] = got["pending"]
            assert (got["status"], request["kind"]) == ("parked", "outcome")
            wrong = {"requestId": request["requestId"], "approved": True}
            said = await refused(client, "agent_respond", sessionId=case.sid, responses=[wrong])
            assert "outcome" in said
            answer = {"requestId": request["requestId"], "outcome": "failed"}
            await use(client, "agent_respond", sessionId=case.sid, responses=[answer], wait=30)

    asyncio.run(main())
    message = case.tool_message()
    assert message["is_error"] and case.runs()["charge 2"] == 1
