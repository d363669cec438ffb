"""`outputSchema` per delivery over HTTP: the answer to that turn is a `result` event."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.eve_cli.channel.channel_support import (
    ServerThread,
    read_events,
    reply,
    settled,
    write_agent,
    write_script,
)

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}


def test_output_schema_over_http(serve: Callable[..., ServerThread], tmp_path: Path) -> None:
    script = write_script(tmp_path / "script.json", [reply('{"city": "Rome", "days": 2}')])
    server = serve(write_agent(tmp_path / "agent", script, ""))
    api = server.url + "/eve/v1"
    bad = httpx.post(api + "/session", json={"message": "plan", "outputSchema": "x"})
    assert bad.status_code == 400 and "outputSchema" in bad.json()["error"]["message"]
    assert httpx.get(api + "/sessions").json()["sessions"] == []  # refused before creating
    created = httpx.post(api + "/session", json={"message": "plan", "outputSchema": SCHEMA})
    assert created.status_code == 202, created.text
    events = read_events(server.url, created.json()["sessionId"], settled())
    [result] = [e for e in events if e["type"] == "result"]
    assert result["value"] == {"city": "Rome", "days": 2}
