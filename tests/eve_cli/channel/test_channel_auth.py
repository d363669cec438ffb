"""The pure checks of `_auth`: loopback rule, session-id shape, bearer header parsing."""

from __future__ import annotations

import pytest

from eve_cli.channel import BindRefusedError, check_bind, is_session_id
from eve_cli.channel._auth import bearer_token, is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"])
def test_loopback_hosts_need_no_token(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.org"])
def test_other_hosts_need_a_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(BindRefusedError) as refused:
        check_bind(host, None)
    message = str(refused.value)
    assert host in message and "EVE_AUTH_TOKEN" in message and "\n" not in message
    check_bind(host, "a-token")


@pytest.mark.parametrize("sid", ["s_0123abcd", "abc", "A-b_c1", "-x", "x" * 64])
def test_well_formed_session_ids(sid: str) -> None:
    assert is_session_id(sid)


@pytest.mark.parametrize(
    "sid", ["", "..", "a..b", ".x", "a.b", "a/b", "a\\b", "a b", "x" * 65, "é", "a\x00"]
)
def test_malformed_session_ids(sid: str) -> None:
    assert not is_session_id(sid)


def test_bearer_header_parsing() -> None:
    assert bearer_token("Bearer tok") == "tok"
    assert bearer_token("bearer  tok ") == "tok"
    assert bearer_token("Bearer ") is None
    assert bearer_token("Basic tok") is None
    assert bearer_token("tok") is None
    assert bearer_token(None) is None


def test_public_surface_is_pinned() -> None:
    import eve_cli.channel as channel
    import eve_cli.channel.client as client

    assert sorted(channel.__all__) == [
        "BindRefusedError",
        "Channel",
        "ChannelError",
        "ChannelServer",
        "ChannelSettings",
        "DevState",
        "NotOwned",
        "Owners",
        "ServeOptions",
        "ServerInfo",
        "Supervisor",
        "answer_scope",
        "bind_socket",
        "check_bind",
        "is_session_id",
        "log_line",
        "principal_of",
        "settings_for",
        "watch_agent",
    ]
    for name in channel.__all__:
        assert getattr(channel, name) is not None, name
    assert sorted(client.__all__) == ["RemoteError", "RemoteReceipt", "RemoteRuntime"]
