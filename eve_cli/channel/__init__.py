"""The HTTP channel (SPEC §10): sessions over HTTP with Starlette on uvicorn.

It runs the runtime facade (`eve_cli.runtime.Runtime`) in-process against the same world as
every other command, and imports nothing from `eve_cli.cli`. Inside: the routes (`_app`), JSON
errors and the facade's exceptions' statuses (`_errors`), bearer tokens and id checks (`_auth`),
Host / Origin / content-type checks (`_guard`), connection bounds and log floods (`_conn`),
NDJSON/SSE streams (`_streams`), background drives (`_supervisor`), the uvicorn server
(`_server`), hot reload (`_reload`) and a client with the facade's methods (`client`).
"""

from eve_cli.channel._app import Channel, ChannelSettings
from eve_cli.channel._auth import BindRefusedError, check_bind, is_session_id
from eve_cli.channel._errors import ChannelError
from eve_cli.channel._server import ChannelServer, ServeOptions, bind_socket

__all__ = [
    "BindRefusedError",
    "Channel",
    "ChannelError",
    "ChannelServer",
    "ChannelSettings",
    "ServeOptions",
    "bind_socket",
    "check_bind",
    "is_session_id",
]
