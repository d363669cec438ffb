"""The HTTP channel answers an interrupted call's "outcome unknown" request
(`inputResponses: [{requestId, outcome, result?}]`); a bad answer is refused."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.eve_cli.channel.channel_support import ServerThread, of_type, read_events
from tests.eve_cli.effects_support import parked_case


def test_an_outcome_given_over_http_becomes_the_call_s_result(
    serve: Callable[..., ServerThread], tmp_path: Path
) -> None:
    case = parked_case(tmp_path / "case", os.environ["EVE_DATA_DIR"], amount=9)
    server = serve(case.agent)
    url = f"{server.url}/eve/v1/session/{case.sid}"
    view = httpx.get(url).json()
    assert (view["status"], view["parkedOn"]) == ("parked", "outcome")
    [request] = view["pending"]
    bad = httpx.post(
        url, json={"inputResponses": [{"requestId": request["requestId"], "outcome": 3}]}
    )
    assert bad.status_code == 400 and "'outcome'" in bad.json()["error"]["message"]
    wrong = {"inputResponses": [{"requestId": request["requestId"], "outcome": "maybe"}]}
    assert httpx.post(url, json=wrong).status_code == 409
    answer = {"requestId": request["requestId"], "outcome": "result", "result": "charged 9 by hand"}
    accepted = httpx.post(url, json={"inputResponses": [answer]})
    assert accepted.status_code == 202, accepted.text
    read_events(server.url, case.sid, of_type("turn.completed"))
    assert case.tool_message()["content"] == "charged 9 by hand"
    assert case.runs()["charge 9"] == 1
