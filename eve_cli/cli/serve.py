"""`eve start` and `eve dev`: serve the agent over HTTP (the channel, SPEC §10)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eve_cli.cli._context import DataOption, Where, WorldOption, choose_world
from eve_cli.cli._errors import EXIT_INTERRUPTED, CliError, user_message

if TYPE_CHECKING:
    from eve_cli.channel import ServerInfo

HostOption = Annotated[
    str, typer.Option("--host", help="Address to bind; anything but loopback needs a token.")
]
PortOption = Annotated[int, typer.Option("--port", help="Port to listen on (0: any free port).")]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="Bearer token clients must send (default: EVE_AUTH_TOKEN).",
        show_default=False,
    ),
]
AuthTokensOption = Annotated[
    Path | None,
    typer.Option(
        "--auth-tokens",
        metavar="FILE",
        help="Static tokens with scopes: lines 'sha256:<digest> SUBJECT [tenant=T] "
        "[scopes=read,send,approve,admin]' (`eve token` makes a token and its digest; default: "
        "EVE_AUTH_TOKENS).",
        show_default=False,
    ),
]
AuthJwksOption = Annotated[
    str | None,
    typer.Option(
        "--auth-jwks",
        metavar="URL|FILE",
        help="Accept JWTs (RS256, ES256) signed by a key of this JWKS (default: EVE_AUTH_JWKS).",
        show_default=False,
    ),
]
AuthIssuerOption = Annotated[
    str | None,
    typer.Option(
        "--auth-issuer",
        metavar="URL",
        help="The JWTs' issuer; without --auth-jwks its OIDC discovery names the keys "
        "(default: EVE_AUTH_ISSUER).",
        show_default=False,
    ),
]
AuthAudienceOption = Annotated[
    str | None,
    typer.Option(
        "--auth-audience",
        metavar="AUD",
        help="The audience JWTs must name (default: EVE_AUTH_AUDIENCE).",
        show_default=False,
    ),
]
AuthClientOption = Annotated[
    str | None,
    typer.Option(
        "--auth-client-id",
        metavar="ID",
        help="The browser view logs in with the issuer as this OIDC client (authorization "
        "code with PKCE; default: EVE_AUTH_CLIENT_ID).",
        show_default=False,
    ),
]
AgentOption = Annotated[
    Path | None,
    typer.Option("--agent", metavar="DIR", help="Agent folder (default ./agent or the built-in)."),
]
ModelOption = Annotated[
    str | None, typer.Option("--model", "-m", help="Model string overriding the agent's.")
]
AllowHostOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-host",
        metavar="NAME",
        help="Another name clients reach the server as (repeatable; default: "
        "EVE_ALLOWED_HOSTS, comma-separated). Loopback names and the bound address always work.",
        show_default=False,
    ),
]
AllowOriginOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-origin",
        metavar="ORIGIN",
        help="A web page origin allowed to call the API, e.g. http://localhost:5173 "
        "(repeatable; default: EVE_ALLOWED_ORIGINS, comma-separated). Others are refused.",
        show_default=False,
    ),
]
RetentionOption = Annotated[
    str | None,
    typer.Option(
        "--retention",
        metavar="AGE|off",
        help="Remove the data of sessions idle longer than AGE (ended, or waiting for their "
        "next message; never one waiting for an answer or with a turn under way), checked at "
        "start and then hourly (default: EVE_RETENTION, else 30d).",
        show_default=False,
    ),
]
StoreIdOption = Annotated[
    str | None,
    typer.Option(
        "--store-id",
        metavar="ID",
        help="Refuse to start unless the world is this store (its id, as `eve start` prints "
        "it; default: EVE_STORE_ID): a worker pointed at the wrong database does not start. "
        "Without it a PostgreSQL worker refuses a store its live peers or its last start say "
        "is another; with it, it joins the store named.",
        show_default=False,
    ),
]
GraceOption = Annotated[
    float,
    typer.Option(
        "--drain-timeout",
        "--grace",
        metavar="SECONDS",
        help="On SIGTERM: seconds a step in flight gets to finish before it is stopped (its "
        "session is released at once: another worker, or the next start, resumes it).",
    ),
]


def register(app: typer.Typer) -> None:
    """Add `start` and `dev` to the `eve` application."""
    app.command("start")(
        _serve_command(False, "Serve sessions over HTTP; resumes in-flight sessions at start-up.")
    )
    app.command("dev")(
        _serve_command(
            True, "Like `start`, and reload the agent folder whenever a file in it is saved."
        )
    )


def _serve_command(reload: bool, doc: str) -> Callable[..., int]:
    """One command function per mode; `start` and `dev` differ only in reloading."""

    def command(
        host: HostOption = "127.0.0.1",
        port: PortOption = 8000,
        token: TokenOption = None,
        agent: AgentOption = None,
        model: ModelOption = None,
        grace: GraceOption = 5.0,
        data: DataOption = None,
        world: WorldOption = None,
        allow_host: AllowHostOption = None,
        allow_origin: AllowOriginOption = None,
        retention: RetentionOption = None,
        store_id: StoreIdOption = None,
        auth_tokens: AuthTokensOption = None,
        auth_jwks: AuthJwksOption = None,
        auth_issuer: AuthIssuerOption = None,
        auth_audience: AuthAudienceOption = None,
        auth_client_id: AuthClientOption = None,
    ) -> int:
        auth = _AuthOptions(
            tokens_file=auth_tokens or _path(os.environ.get("EVE_AUTH_TOKENS")),
            jwks=auth_jwks or os.environ.get("EVE_AUTH_JWKS") or None,
            issuer=auth_issuer or os.environ.get("EVE_AUTH_ISSUER") or None,
            audience=auth_audience or os.environ.get("EVE_AUTH_AUDIENCE") or None,
            client_id=auth_client_id or os.environ.get("EVE_AUTH_CLIENT_ID") or None,
        )
        peers = (
            _names(allow_host, "EVE_ALLOWED_HOSTS"),
            _names(allow_origin, "EVE_ALLOWED_ORIGINS"),
        )
        where = choose_world(data, world, create=True)
        return run(
            host, port, token, agent, model, grace, where,
            reload=reload, peers=peers, retention=retention, auth=auth,
            store_id=store_id or os.environ.get("EVE_STORE_ID") or None,
        )  # fmt: skip

    command.__doc__ = doc
    return command


SWEEP = 0.25  # seconds between looks for a dead worker's sessions (a takeover within 2 s)


def run(
    host: str,
    port: int,
    token: str | None,
    agent: Path | None,
    model: str | None,
    grace: float,
    data_dir: Where,
    *,
    reload: bool,
    peers: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
    retention: str | None = None,
    auth: _AuthOptions | None = None,
    store_id: str | None = None,
) -> int:
    """Serve until SIGTERM (exit 0) or SIGINT (exit 130); ``peers``: the allowed host names
    and browser origins besides the server's own; ``retention``: an age or "off" (None:
    EVE_RETENTION, else 30 days); ``auth``: the `--auth-*` options over the agent folder's
    ``auth.py``; ``store_id``: the store the world must be (else it refuses to start)."""
    from eve_cli.channel import (
        BindRefusedError,
        Channel,
        ChannelServer,
        ServeOptions,
        bind_socket,
        check_bind,
        log_line,
        settings_for,
    )
    token = token or os.environ.get("EVE_AUTH_TOKEN") or None
    keeper = _Retention.chosen(retention, data_dir)
    try:
        runtime = _serving_runtime(data_dir, agent, model, store_id)
    except CliError:
        raise
    except Exception as exc:  # a broken agent folder or model string: one line, file and line
        raise CliError(f"cannot load the agent: {exc}") from None
    try:
        identity, fleet = _joining(runtime, store_id)
    except BaseException:
        runtime.close()
        raise
    verifiers = _verifiers(Path(runtime.agent_dir), auth or _AuthOptions())
    try:
        check_bind(host, token or verifiers)
    except BindRefusedError as exc:
        runtime.close()
        raise CliError(user_message(exc)) from None
    info: ServerInfo = {**_agent_info(runtime, data_dir), "world": identity}
    options = ServeOptions(
        host=host,
        port=port,
        token=token,
        auth=verifiers,
        grace=grace,
        info=info,
        allowed_hosts=peers[0],
        allowed_origins=peers[1],
        # Workers on other machines share the world: a dead one's sessions are looked for.
        sweep=SWEEP if runtime.world.shared else 0.0,
        retention=keeper,
        retention_every=keeper.every if keeper is not None else 0.0,
        membership=fleet,
    )
    settings = settings_for(options)
    runtime.world.notice = settings.log  # a database away and back: one line each
    channel = Channel(runtime, settings)
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        raise CliError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port"
        ) from None

    if token or verifiers:
        log_line(f"auth: {verifiers.describe() if verifiers else 'the token'}"
                 f"{' and the token' if token and verifiers else ''}")  # fmt: skip

    def ready(url: str) -> None:
        mode = "dev (hot reload)" if reload else "start"
        schema = f", schema {identity['schema']}" if identity.get("schema") else ""
        typer.echo(
            f"eve {mode}: serving {url} (agent {info.get('agent')}, data {data_dir}, store "
            f"{identity['storeId']}, format {identity['format']}{schema})"
        )

    background = _reloader(runtime, log_line, channel) if reload else None
    server = ChannelServer(channel, sock, on_ready=ready)
    try:
        sig = asyncio.run(server.serve(background))
    finally:
        runtime.close()
        if keeper is not None:
            keeper.close()
    log_line("stopped")
    return EXIT_INTERRUPTED if sig == signal.SIGINT else 0


class _Retention:
    """The server's retention job: sessions idle past ``age`` removed by the code `eve gc`
    runs, through a reader of its own (a lease it takes is then not the serving runtime's)."""

    def __init__(self, age: float, said: str, where: Where) -> None:
        self.age, self.said, self.where = age, said, where
        self.every = min(3600.0, max(1.0, age / 4))  # a short age (tests) is kept promptly
        self._reader: Any = None

    @classmethod
    def chosen(cls, given: str | None, where: Where) -> _Retention | None:
        from eve_cli._retention import parse_duration

        value = (given or os.environ.get("EVE_RETENTION") or "30d").strip()
        if value.lower() == "off":
            return None
        try:
            return cls(parse_duration(value), value, where)
        except ValueError as exc:
            raise CliError(f"--retention / EVE_RETENTION: {exc}, or off", 2) from None

    def __call__(self) -> str | None:
        import time

        from eve_cli._retention import RETAINED_UNLESS_IDLE, collect, collecting_runtime, removed
        from eve_cli.cli._tables import human_bytes

        if self._reader is None:
            self._reader = collecting_runtime(self.where.url or self.where.path)
        allowed = set(RETAINED_UNLESS_IDLE)
        done = removed(collect(self._reader, time.time() - self.age, allowed, dry_run=False))
        if not done:
            return None
        freed = human_bytes(sum(e.bytes for e in done))
        return f"retention: removed {len(done)} session(s) idle over {self.said} ({freed})"

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()


@dataclass(frozen=True)
class _AuthOptions:
    """The `--auth-*` options given (None: not given), over the agent folder's ``auth.py``."""

    tokens_file: Path | None = None
    jwks: str | None = None
    issuer: str | None = None
    audience: str | None = None
    client_id: str | None = None


def _verifiers(agent_dir: Path, given: _AuthOptions) -> Any:
    """The server's verifiers: ``auth.py`` of the agent folder, then the options; an HS256
    secret from EVE_AUTH_HS256_SECRET. A setting that cannot work is one line."""
    from eve_cli.auth import load_auth
    from eve_cli.channel import log_line

    try:
        settings = load_auth(agent_dir).overridden(
            **{k: getattr(given, k) for k in given.__dataclass_fields__},
            secret_env="EVE_AUTH_HS256_SECRET" if os.environ.get("EVE_AUTH_HS256_SECRET") else None,
        )
        return settings.build(log_line)
    except ValueError as exc:
        raise CliError(f"auth: {exc}", 2) from None


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _names(given: list[str] | None, variable: str) -> tuple[str, ...]:
    """The option's values, or the variable's comma-separated ones."""
    values = given or os.environ.get(variable, "").split(",")
    return tuple(v.strip() for v in values if v.strip())


def _store_of(runtime: Any, expected: str | None) -> dict[str, str | int | None]:
    """The identity of the world ``runtime`` serves (`world.store_identity`), as `/info` gives
    it; ``expected``: the store id it must have (`--store-id`), else one line refuses."""
    from world import store_identity

    found = store_identity(runtime.world)
    if expected is not None and expected.strip().lower() != (found.id or "").lower():
        raise CliError(
            f"the world at {found.where} is store {found.id or '(none yet)'}, not "
            f"{expected.strip()} (--store-id / EVE_STORE_ID): not starting against another store"
        )
    return {"where": found.where, "storeId": found.id, "format": found.format,
            "schema": found.schema}  # fmt: skip


def _serving_runtime(
    where: Where, agent: Path | None, model: str | None, pinned: str | None
) -> Any:
    """The runtime serving on ``where``. A database with no store yet gets one, unless this
    deployment joined another (`_fleet.refuse_a_new_store`): a worker pointed at the wrong
    database makes nothing there."""
    from eve_cli.cli._fleet import refuse_a_new_store
    from eve_cli.cli._runtime import runtime_at
    from world import store_identity

    if where.url is None:
        return runtime_at(where, agent_dir=agent, model=model)
    runtime = runtime_at(where, agent_dir=agent, model=model, create=False)
    try:
        if store_identity(runtime.world).id is not None:
            return runtime
    except BaseException:
        runtime.close()
        raise
    folder = _own_folder(runtime)
    runtime.close()
    refuse_a_new_store(folder, str(where), pinned)
    return runtime_at(where, agent_dir=agent, model=model)


def _own_folder(runtime: Any) -> Path | None:
    """The deployment's agent folder (None: the built-in agent, no folder of its own)."""
    from eve_cli._loader import DEFAULT_AGENT_DIR

    folder = Path(runtime.agent_dir)
    return None if folder == DEFAULT_AGENT_DIR else folder


def _joining(runtime: Any, pinned: str | None) -> tuple[dict[str, str | int | None], Any]:
    """The identity of the world ``runtime`` serves (`_store_of`) and, on a store others
    share, this worker's `Fleet` (else None), the store joined remembered; refuses, in one
    line, a store its peers or its last join say is another (see `_fleet`)."""
    from eve_cli.channel import log_line
    from eve_cli.cli._fleet import Fleet
    from world import Presence

    identity = _store_of(runtime, pinned)
    world = runtime.world
    if not isinstance(world, Presence) or not identity["storeId"]:
        return identity, None
    fleet = Fleet(world, str(identity["storeId"]), str(identity["where"]),
                  str(runtime.agent.name), _own_folder(runtime))  # fmt: skip
    fleet.check(pinned)
    fleet.joined(log_line)
    return identity, fleet


def _agent_info(runtime: Any, data_dir: Where) -> ServerInfo:
    agent = runtime.agent
    return {
        "agent": agent.name,
        "agentDir": str(runtime.agent_dir),
        "model": runtime.model or agent.model,
    }


def _reloader(
    runtime: Any, log: Callable[[str], None], channel: Any
) -> Callable[[], Coroutine[Any, Any, None]]:
    from eve_cli._loader import DEFAULT_AGENT_DIR
    from eve_cli.channel import DevState, watch_agent

    directory = Path(runtime.agent_dir)

    async def watch() -> None:
        if directory == DEFAULT_AGENT_DIR:
            log("serving the built-in agent: nothing to reload (pass --agent DIR)")
            return
        stop = asyncio.Event()
        channel.dev = state = DevState(str(directory.resolve()), str(runtime.agent.name))
        try:
            await watch_agent(
                directory, lambda: str(runtime.reload_agent().name), log, stop, state=state
            )
        finally:
            stop.set()

    return watch
