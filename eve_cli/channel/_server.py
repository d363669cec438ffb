"""Run the channel on uvicorn: bind, announce, shut down within a bound on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import uvicorn

from eve_cli.auth import Verifiers
from eve_cli.channel._app import Channel, ChannelSettings, ServerInfo
from eve_cli.channel._auth import check_bind
from eve_cli.channel._conn import (
    FloodFilter,
    FloodGuard,
    default_max_connections,
    guarded_protocol,
    loop_error_logger,
)
from eve_cli.channel._housekeeping import Membership, RetentionJob

# Seconds an idle connection is kept. Longer than clients keep theirs (httpx and Node: 4-5 s),
# so the client closes first: a server closing at the same moment races the client's next
# request on that connection, which then fails with a reset (httpx.ReadError), the more often
# the busier the loop is when the close is due.
KEEP_ALIVE = 75
# Seconds from a connection's opening (or a new request's first byte) to the end of that
# request's headers; any real client takes milliseconds.
HEADER_TIMEOUT = 10.0


@dataclass
class ServeOptions:
    """What `eve start` / `eve dev` were asked for."""

    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    auth: Verifiers | None = None  # see ChannelSettings.auth
    grace: float = 5.0
    max_body: int = 1 << 20
    heartbeat: float = 15.0
    info: ServerInfo = field(default_factory=ServerInfo)
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    sweep: float = 0.0  # see ChannelSettings.sweep
    retention: RetentionJob | None = None  # see ChannelSettings.retention
    retention_every: float = 3600.0
    membership: Membership | None = None  # see ChannelSettings.membership


def log_line(message: str) -> None:
    """One server log line on stderr."""
    print(f"eve: {message}", file=sys.stderr, flush=True)


class _Server(uvicorn.Server):
    """uvicorn's server, ending streams at the first signal and exiting without re-raising it."""

    def __init__(self, config: uvicorn.Config, channel: Channel, announce: Callable[[], None]):
        super().__init__(config)
        self.channel = channel
        self.announce = announce
        self.signalled: int | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.announce()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.signalled is None:
            self.signalled = sig
            loop = asyncio.get_event_loop()
            loop.call_soon_threadsafe(self.channel.begin_shutdown)
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises the signal after shutdown; `eve start` exits with a code instead.
        handled = (signal.SIGINT, signal.SIGTERM)
        try:
            before = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        except ValueError:  # not the main thread (tests running the server in a thread)
            yield
            return
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: an ephemeral one)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # proto named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (accepted
    # ones inherit it); without it a response written in two parts waited ~40 ms for the
    # client's delayed ACK (Nagle), so every POST took 45 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class ChannelServer:
    """One channel served by uvicorn on an already bound socket."""

    def __init__(
        self,
        channel: Channel,
        sock: socket.socket,
        on_ready: Callable[[str], None] | None = None,
        *,
        header_timeout: float = HEADER_TIMEOUT,
        max_connections: int | None = None,
    ) -> None:
        host, port = sock.getsockname()[:2]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        self.channel = channel
        channel.peers.bind(host, port)
        self._sock = sock
        log = channel.settings.log
        config = uvicorn.Config(
            channel.app,
            http=guarded_protocol(
                header_timeout, max_connections or default_max_connections(), log
            ),
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=max(1, int(channel.settings.grace) + 1),
            timeout_keep_alive=KEEP_ALIVE,
        )
        flood = FloodFilter()
        for name in ("uvicorn.error", "asyncio"):
            if not any(isinstance(f, FloodFilter) for f in logging.getLogger(name).filters):
                logging.getLogger(name).addFilter(flood)
        self._server = _Server(config, channel, lambda: on_ready(self.url) if on_ready else None)

    async def serve(
        self, background: Callable[[], Coroutine[Any, Any, None]] | None = None
    ) -> int | None:
        """Serve until a signal or :meth:`stop`; returns the signal that stopped it, if any.

        ``background`` runs alongside (the hot-reload watcher) and is cancelled at the end.
        """
        asyncio.get_running_loop().set_exception_handler(
            loop_error_logger(self.channel.settings.log)
        )
        extra: asyncio.Task[None] | None = None
        if background is not None:
            extra = asyncio.get_running_loop().create_task(background())
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            if extra is not None:
                extra.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await extra
        return self._server.signalled

    def stop(self) -> None:
        """Shut down as on SIGTERM (call from the server's event loop)."""
        self.channel.begin_shutdown()
        self._server.should_exit = True


def settings_for(options: ServeOptions) -> ChannelSettings:
    """Channel settings from the command's options."""
    check_bind(options.host, options.token or options.auth)
    return ChannelSettings(
        token=options.token,
        auth=options.auth,
        max_body=options.max_body,
        heartbeat=options.heartbeat,
        grace=options.grace,
        info=options.info,
        log=FloodGuard(log_line),
        # The name asked for (`--host myhost.lan`) is one the server is bound as, though the
        # socket knows only its address.
        allowed_hosts=(*options.allowed_hosts, options.host),
        allowed_origins=options.allowed_origins,
        sweep=options.sweep,
        retention=options.retention,
        retention_every=options.retention_every,
        membership=options.membership,
    )
