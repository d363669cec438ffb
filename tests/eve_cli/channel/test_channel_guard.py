"""The Host and Origin rules of `_guard.Peers`, case by case (the attacks themselves run against
a real server in test_channel_web_attacks)."""

from __future__ import annotations

from typing import Any

import pytest

from eve_cli.channel._guard import Peers


def peers(host: str, port: int = 8000, **kw: Any) -> Peers:
    p = Peers(**kw)
    p.bind(host, port)
    return p


@pytest.mark.parametrize(
    ("bound", "header", "ok"),
    [
        ("127.0.0.1", "127.0.0.1:8000", True),
        ("127.0.0.1", "localhost:8000", True),
        ("127.0.0.1", "LOCALHOST:8000", True),
        ("127.0.0.1", "[::1]:8000", True),
        ("127.0.0.1", "localhost", True),  # no port named: the name decides
        ("127.0.0.1", "localhost:9000", False),
        ("127.0.0.1", "evil.example:8000", False),
        ("127.0.0.1", "127.0.0.1.evil.example:8000", False),
        ("127.0.0.1", "10.0.0.5:8000", False),
        ("127.0.0.1", "", False),
        ("127.0.0.1", "localhost:80x", False),
        ("::1", "[::1]:8000", True),
        ("::", "[fe80::1]:8000", True),  # bound to every address: any IP literal
        ("0.0.0.0", "192.168.1.9:8000", True),
        ("0.0.0.0", "myhost.lan:8000", False),
    ],
)
def test_host(bound: str, header: str, ok: bool) -> None:
    assert (peers(bound).host_problem(header) is None) is ok


def test_configured_names_and_origins() -> None:
    p = peers("0.0.0.0", hosts=("myhost.lan",), origins=("http://localhost:5173",))
    assert p.host_problem("myhost.lan:8000") is None
    assert p.origin_allowed("http://localhost:5173", "myhost.lan:8000")
    assert p.origin_allowed("http://myhost.lan:8000", "myhost.lan:8000")  # its own page
    assert not p.origin_allowed("http://evil.example", "myhost.lan:8000")
    assert not p.origin_allowed("null", "myhost.lan:8000")
    assert peers("127.0.0.1", hosts=("*",)).host_problem("anything:1") is None
