"""The HTTP channel (SPEC §10): sessions over HTTP with Starlette on uvicorn.

It runs the runtime facade (`eve_cli.runtime.Runtime`) in-process against the same world as
every other command, and imports nothing from `eve_cli.cli`. Inside: the routes (`_app`), JSON
errors and the facade's exceptions' statuses (`_errors`), the principal of each request and id
checks (`_auth`), each route's scope (`_access`), sessions' owners (`_owners`),
Host / Origin / content-type checks (`_guard`), connection bounds and log floods (`_conn`),
NDJSON/SSE streams (`_streams`), background drives (`_supervisor`), the uvicorn server
(`_server`), hot reload (`_reload`) and a client with the facade's methods (`client`). Its
names load on first use: the client and the supervisor need no web framework.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eve_cli.channel._app import Channel as Channel
    from eve_cli.channel._app import ChannelSettings as ChannelSettings
    from eve_cli.channel._app import ServerInfo as ServerInfo
    from eve_cli.channel._auth import BindRefusedError as BindRefusedError
    from eve_cli.channel._auth import check_bind as check_bind
    from eve_cli.channel._auth import is_session_id as is_session_id
    from eve_cli.channel._errors import ChannelError as ChannelError
    from eve_cli.channel._owners import NotOwned as NotOwned
    from eve_cli.channel._owners import Owners as Owners
    from eve_cli.channel._owners import answer_scope as answer_scope
    from eve_cli.channel._owners import principal_of as principal_of
    from eve_cli.channel._reload import DevState as DevState
    from eve_cli.channel._reload import watch_agent as watch_agent
    from eve_cli.channel._server import ChannelServer as ChannelServer
    from eve_cli.channel._server import ServeOptions as ServeOptions
    from eve_cli.channel._server import bind_socket as bind_socket
    from eve_cli.channel._server import log_line as log_line
    from eve_cli.channel._server import settings_for as settings_for
    from eve_cli.channel._supervisor import Supervisor as Supervisor

# Where each name lives: loaded on first use, so the remote client (`client`) and the
# supervisor of `eve mcp` do not import Starlette and uvicorn.
_WHERE = {
    "Channel": "_app",
    "ChannelSettings": "_app",
    "ServerInfo": "_app",
    "BindRefusedError": "_auth",
    "check_bind": "_auth",
    "is_session_id": "_auth",
    "ChannelError": "_errors",
    "NotOwned": "_owners",
    "Owners": "_owners",
    "answer_scope": "_owners",
    "principal_of": "_owners",
    "DevState": "_reload",
    "watch_agent": "_reload",
    "ChannelServer": "_server",
    "ServeOptions": "_server",
    "bind_socket": "_server",
    "log_line": "_server",
    "settings_for": "_server",
    "Supervisor": "_supervisor",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"eve_cli.channel.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
