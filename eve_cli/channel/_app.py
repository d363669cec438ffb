"""The routes of SPEC §10 on Starlette: sessions over HTTP, JSON in and out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from eve_cli._facade import Receipt, ReceiptBody, ServingFacade, TurnPolicy
from eve_cli._json import JSONObject
from eve_cli._schedules import NAME as SCHEDULE_NAME
from eve_cli._version import __version__
from eve_cli.auth import ADMIN, OPERATOR, READ, SEND, Principal, StaticTokens, Verifiers
from eve_cli.channel._access import NeedApp, check, login_settings, need, public
from eve_cli.channel._auth import AuthGate, is_session_id, parent_of
from eve_cli.channel._bodies import (
    input_responses,
    optional_str,
    output_schema,
    read_json,
    receipt_body,
    turn_policy,
)
from eve_cli.channel._errors import (
    CatchAll,
    ChannelError,
    ErrorBody,
    error_body,
    from_runtime_error,
    on_channel_error,
    on_http_exception,
)
from eve_cli.channel._guard import Peers, RequestGuard
from eve_cli.channel._housekeeping import (
    Membership,
    RetentionJob,
    advertise,
    keep_membership,
    keep_retention,
)
from eve_cli.channel._metrics import CONTENT_TYPE, ServerMetrics
from eve_cli.channel._owners import NotOwned, Owners, answer_scope, principal_of
from eve_cli.channel._reload import DevState
from eve_cli.channel._schedules import Scheduler
from eve_cli.channel._streams import StreamHub, stream_response
from eve_cli.channel._supervisor import Supervisor
from eve_cli.channel._timers import Timers
from eve_cli.channel._web import web_routes
from eve_cli.execution import PAGE, SessionView
from eve_cli.mcp import McpEndpoint
from eve_cli.runtime import SessionNotFoundError

PREFIX = "/eve/v1"
MODES = ("conversation", "task")
_ACTIONS = ("cancel", "compact", "clear", "reset")


class ServerInfo(TypedDict, total=False):
    """What the server adds to ``GET /info``: the agent it serves and the world it serves
    from (`/ready` checks the store is still the one it started on)."""

    agent: str
    agentDir: str
    model: str | None
    world: dict[str, str | int | None]  # the store's identity: storeId, where, ...


class Readiness(TypedDict):
    """``GET /ready``: whether this worker can serve, else which parts cannot."""

    ready: bool
    problems: NotRequired[list[str]]


class Created(TypedDict):
    """``POST /session``'s answer when another call already delivered its message, or it had
    none: the session, and whether this call made it."""

    sessionId: str
    created: bool


class CreatedAndSent(Created, ReceiptBody):
    """``POST /session``'s answer with what happened to its message."""


@dataclass
class ChannelSettings:
    """Knobs of one server; defaults suit `eve start`."""

    token: str | None = None  # a static token with every scope (EVE_AUTH_TOKEN)
    # Who may call (`eve_cli.auth`); None: only ``token``, if any (no token: loopback only).
    auth: Verifiers | None = None
    max_body: int = 1 << 20
    heartbeat: float = 15.0
    grace: float = 5.0
    info: ServerInfo = field(default_factory=ServerInfo)
    log: Callable[[str], None] = print
    # Names the server is reached as besides its bound address and loopback ("*": any).
    allowed_hosts: tuple[str, ...] = ()
    # Foreign browser origins allowed to call it (CORS; "*": any), e.g. "http://localhost:5173".
    allowed_origins: tuple[str, ...] = ()
    body_timeout: float = 30.0
    # Seconds between looks for sessions with work and no live worker (0: only at start): on
    # a world other machines' workers share, a dead worker's sessions are taken over so.
    sweep: float = 0.0
    # Removes sessions idle past the server's retention age (None: keep everything); run at
    # start and every `retention_every` seconds (see `_housekeeping`).
    retention: RetentionJob | None = None
    retention_every: float = 3600.0
    # This worker among those sharing its store (None: a store of one): advertised while it
    # serves, its live peers listed by `GET /info`.
    membership: Membership | None = None


async def _store_problems(runtime: ServingFacade, settings: ChannelSettings) -> list[str]:
    """What `/ready` says of the store: unreachable, or another store than the one the server
    started on (`info["world"]["storeId"]`: a database or directory replaced under it)."""
    seen = (settings.info.get("world") or {}).get("storeId")
    try:  # the cheapest read every store answers: the store's id
        now = await runtime.call(runtime.store_id)
    except Exception as exc:  # logged (the flood guard bounds a probe's every second)
        settings.log(f"not ready: the store: {type(exc).__name__}: {exc}")
        return ["store unreachable"]
    if seen is not None and now != seen:
        settings.log(f"not ready: the world is now store {now}, not {seen}")
        return ["store changed"]
    return []


async def _peers(
    membership: Membership, log: Callable[[str], None]
) -> list[dict[str, object]] | None:
    """The live workers of the store, as `/info` lists them (None: the store is away, which
    `/ready` says; `/info` still answers)."""
    try:
        return await asyncio.to_thread(membership.peers)
    except Exception as exc:
        log(f"fleet: {type(exc).__name__}: {exc}")
        return None


class Channel:
    """The HTTP channel of one runtime: its app, its background drives and its open streams."""

    def __init__(self, runtime: ServingFacade, settings: ChannelSettings | None = None) -> None:
        self.runtime = runtime
        self.settings = settings or ChannelSettings()
        self.metrics = ServerMetrics(runtime.sessions, runtime.resumable)
        self.supervisor = Supervisor(runtime, self.settings.log, self.metrics)
        self.hub = StreamHub(self.settings.heartbeat, self.settings.log)
        self.peers = Peers(self.settings.allowed_hosts, self.settings.allowed_origins)
        self.verifiers = _verifiers(self.settings)
        self.owners = Owners(runtime)
        self.mcp = McpEndpoint(self._mcp_server)  # `/mcp`: the agent as an MCP server (§13)
        # Set by `eve dev`: its reloads' results, shown by `GET /info` (and the browser view).
        self.dev: DevState | None = None
        cors = (
            [
                Middleware(
                    CORSMiddleware,
                    allow_origins=list(self.settings.allowed_origins),
                    allow_methods=["GET", "POST"],
                    allow_headers=["authorization", "content-type", "last-event-id"],
                )
            ]
            if self.settings.allowed_origins
            else []
        )
        self.app = Starlette(
            routes=self._routes(),
            middleware=[
                Middleware(CatchAll, log=self.settings.log),
                Middleware(RequestGuard, peers=self.peers),
                *cors,
                Middleware(AuthGate, verifiers=self.verifiers, log=self.settings.log),
            ],
            exception_handlers={
                ChannelError: on_channel_error,
                HTTPException: on_http_exception,
            },
            lifespan=self._lifespan,
        )
        self.app.router.redirect_slashes = False  # an id ending in %2F is not the id without it

    def begin_shutdown(self) -> None:
        """End open streams at once (called on SIGTERM, before connections are awaited)."""
        self.hub.close()
        self.mcp.begin_close()

    def _mcp_server(self) -> Any:
        from eve_cli.mcp import AgentService, build_server

        name = str(self.settings.info.get("agent") or "eve")
        return build_server(AgentService(self.runtime, self.supervisor), name)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with self.running():
            yield

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The channel's background work while it serves: in-flight sessions resumed, timers,
        schedules, the sweep for sessions to take over; on exit, drives get their grace.

        Its own app runs this as its lifespan. An application that mounts ``channel.app``
        inside its own ASGI app (whose lifespan a mount does not pass on) enters it from its
        own lifespan instead: ``async with channel.running(): yield``.
        """
        resumed = self.supervisor.resume_in_flight()
        if resumed:
            self.settings.log(f"resuming {len(resumed)} in-flight session(s): {', '.join(resumed)}")
        loop = asyncio.get_running_loop()
        timers = Timers(self.runtime, self.supervisor.kick, self.settings.log)
        self.supervisor.on_driven = timers.driven
        scheduler = Scheduler(self.runtime, self.supervisor.kick, self.settings.log)
        scheduler.metrics = self.metrics
        unwatch = self.metrics.watch()
        background = [
            loop.create_task(timers.run(), name="server-timers"),
            loop.create_task(scheduler.run(), name="server-schedules"),
        ]
        if self.settings.sweep > 0:
            background.append(loop.create_task(self.supervisor.sweep(self.settings.sweep)))
        if self.settings.retention is not None:
            every, log = self.settings.retention_every, self.settings.log
            kept = keep_retention(self.settings.retention, every, log)
            background.append(loop.create_task(kept, name="server-retention"))
        if self.settings.membership is not None:  # listed by `/info` from the first request
            await advertise(self.settings.membership, self.settings.log)
            member = keep_membership(self.settings.membership, self.settings.log)
            background.append(loop.create_task(member, name="server-membership"))
        try:
            yield
        finally:
            unwatch()
            for task in background:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.hub.close()
            await self.mcp.aclose()
            await self.supervisor.close(self.settings.grace)

    def _routes(self) -> list[Route]:
        """Every route, each with the scope it needs or marked public (a test holds every
        route of the table to this)."""
        s = PREFIX + "/session/{sid}"
        # The page may call the issuer it logs in with (its token endpoint), nothing else.
        login = self.verifiers.login
        connect = (login.origin,) if login is not None else ()
        return [
            Route(PREFIX + "/health", public(self.health), methods=["GET"]),
            Route(PREFIX + "/ready", public(self.ready), methods=["GET"]),
            Route(PREFIX + "/auth", public(self.auth_info), methods=["GET"]),
            Route("/metrics", need(ADMIN, self.scrape), methods=["GET"]),
            Route(PREFIX + "/info", need(READ, self.info), methods=["GET"]),
            Route(PREFIX + "/session", need(SEND, self.create), methods=["POST"]),
            Route(PREFIX + "/sessions", need(READ, self.list_sessions), methods=["GET"]),
            Route(PREFIX + "/schedules", need(READ, self.list_schedules), methods=["GET"]),
            Route(PREFIX + "/schedules/{name}", need(ADMIN, self.run_schedule), methods=["POST"]),
            Route(s, need(READ, self.get_session), methods=["GET"]),
            Route(s, need(SEND, self.deliver), methods=["POST"]),
            Route(s + "/stream", need(READ, self.stream), methods=["GET"]),
            Route(s + "/fork", need(SEND, self.fork), methods=["POST"]),
            *(Route(f"{s}/{a}", need(SEND, self._action(a)), methods=["POST"]) for a in _ACTIONS),
            Route(
                PREFIX + "/session/{rest:path}", need(READ, self.malformed), methods=["GET", "POST"]
            ),
            Route("/mcp", NeedApp(READ, self.mcp), methods=["GET", "POST", "DELETE"]),
            *(Route(r.path, public(r.endpoint), methods=["GET"]) for r in web_routes(connect)),
        ]

    # -- routes --------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def ready(self, request: Request) -> Response:
        """200 when this worker can serve: its store answers (opened and migrated before the
        server started) and its agent loaded; else 503 naming which. Open like `/health` (a
        load balancer's probe has no token), so it names the part, not the error."""
        problems = await _store_problems(self.runtime, self.settings)
        if self.runtime.agent_error() is not None:
            problems.append("agent failed to load")
        body: Readiness = {"ready": not problems}
        if problems:
            body["problems"] = problems
        return JSONResponse(body, 503 if problems else 200)

    async def scrape(self, request: Request) -> Response:
        """The worker's metrics in the Prometheus text format (same auth as the API)."""
        text = await self._call_sync(self.metrics.render)
        return Response(text, media_type=CONTENT_TYPE)

    async def auth_info(self, request: Request) -> Response:
        """How the browser view logs in (`_access.login_settings`)."""
        return JSONResponse(await login_settings(self.verifiers))

    async def info(self, request: Request) -> Response:
        body = {
            "name": "eve",
            "version": __version__,
            "api": "eve/v1",
            "turnPolicies": ["steer", "queue"],
            "maxBodyBytes": self.settings.max_body,
            **self.settings.info,
        }
        if self.dev is not None:
            body["dev"] = self.dev.as_json()
        if self.settings.membership is not None:
            body["peers"] = await _peers(self.settings.membership, self.settings.log)
        caller = principal_of(request.scope)
        if Owners.by(caller) is not None:  # who is asking (none on a loopback-only server)
            body["principal"] = {**caller.record, "scopes": sorted(caller.scopes)}
        return JSONResponse(body)

    async def create(self, request: Request) -> Response:
        body = await self._json(request, allow_empty=True)
        message = optional_str(body, "message")
        mode = optional_str(body, "mode")
        principal = principal_of(request.scope)
        operation_id = Owners.operation_id(principal, optional_str(body, "operationId"))
        policy, schema = turn_policy(body), output_schema(body)
        if mode is not None and mode not in MODES:
            raise ChannelError(400, f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        # The session and its first message are one record: workers given the same operationId
        # at once find one session, store the message once, and only one answers created.
        started = self.runtime.start_session(
            message, operation_id=operation_id, mode=mode, output_schema=schema,
            meta=Owners.meta(principal), by=Owners.by(principal), turn_policy=policy,
        )  # fmt: skip
        sid, created, receipt = await self._call(started)
        out: Created | CreatedAndSent = {"sessionId": sid, "created": created}
        if receipt is not None:
            out = {"sessionId": sid, "created": created, **self._received(sid, receipt)}
        if message is not None:
            self.supervisor.kick(sid)  # also when its creator died before driving it
        return JSONResponse(out, 202)

    async def list_sessions(self, request: Request) -> Response:
        """The sessions the caller may see (its own, its tenant's; every one for ``admin``)."""
        rows = await self._call_sync(self.runtime.sessions)
        return JSONResponse({"sessions": Owners.visible(principal_of(request.scope), rows)})

    async def list_schedules(self, request: Request) -> Response:
        rows, problems = await self._call_sync(self.runtime.schedule_rows)
        return JSONResponse({"schedules": rows, "problems": problems})

    async def run_schedule(self, request: Request) -> Response:
        """Start a session of a schedule now (by hand, not a tick): 202 ``{sessionId}``."""
        name = request.path_params["name"]
        if not SCHEDULE_NAME.fullmatch(name):
            raise ChannelError(400, f"schedule name {name!r}: letters, digits, '-' and '_'")
        try:
            sid = await self.runtime.run_schedule_now(name)
        except LookupError as exc:
            raise ChannelError(404, str(exc)) from None
        except Exception as exc:
            raise self._answer(exc, None) from None
        self.supervisor.kick(sid)
        return JSONResponse({"sessionId": sid}, 202)

    async def get_session(self, request: Request) -> Response:
        """The session's view with a page of its turns (see :func:`_page_asked`)."""
        sid = await self._owned(request)
        count, first = _page_asked(request)
        view = await self._view(sid, count, first)
        found = await self._call_sync(lambda: self.runtime.lineage(sid), sid)
        forks = await self.owners.visible_ids(principal_of(request.scope), found["forks"])
        view["forkedFrom"], view["forks"] = found["forkedFrom"], forks
        return JSONResponse({**view, "earlier": _earlier(view.get("turnsFrom", 1))})

    async def fork(self, request: Request) -> Response:
        """A new session from a checkpoint of this one (``at``: ``T`` or ``T.S``; none: the
        latest): 201 ``{sessionId, forkedFrom, checkpoint}``."""
        sid = await self._owned(request)
        at = optional_str(await self._json(request, allow_empty=True), "at")
        try:
            out = await self.runtime.fork(sid, at, by=Owners.by(principal_of(request.scope)))
        except Exception as exc:
            mapped = self._answer(exc, sid)
            if mapped is exc and isinstance(exc, ValueError):  # a malformed checkpoint
                raise ChannelError(400, str(exc)) from None
            raise mapped from None
        return JSONResponse(out, 201)

    async def deliver(self, request: Request) -> Response:
        sid = await self._owned(request)
        body = await self._json(request)
        message = optional_str(body, "message")
        schema = output_schema(body)
        responses = body.get("inputResponses")
        if (message is None) == (responses is None):
            raise ChannelError(400, "send exactly one of 'message' or 'inputResponses'")
        principal = principal_of(request.scope)
        if message is not None:  # an unknown session is the runtime's 404
            out = await self._deliver(sid, message, turn_policy(body), schema, principal)
            if out["disposition"] == "rejected":
                return _rejected(sid, out)
            return JSONResponse({"sessionId": sid, **out}, 202)
        checked = input_responses(responses)
        await self._check_pending(sid, checked, principal)
        answered = self.runtime.respond(sid, checked, by=Owners.by(principal))
        receipt = receipt_body(await self._call(answered, sid))
        if receipt["disposition"] == "rejected":
            return _rejected(sid, receipt)
        self.supervisor.kick(sid)
        return JSONResponse({"sessionId": sid, "accepted": len(checked)}, 202)

    async def stream(self, request: Request) -> Response:
        sid = await self._owned(request)
        await self._view(sid)
        return await stream_response(request, self.runtime, self.hub, sid)

    def _action(self, name: str) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            sid = await self._owned(request)
            await self._json(request, allow_empty=True)
            by = Owners.by(principal_of(request.scope))
            receipt = receipt_body(await self._call(getattr(self.runtime, name)(sid, by=by), sid))
            if receipt["disposition"] == "rejected":
                return _rejected(sid, receipt)
            self.supervisor.kick(sid)
            return JSONResponse({"sessionId": sid, "action": name}, 202)

        return run

    async def malformed(self, request: Request) -> Response:
        first = request.path_params["rest"].split("/", 1)[0]
        if not is_session_id(first, child=request.method == "GET"):
            raise ChannelError(400, f"malformed session id {first!r}")
        raise HTTPException(404)

    # -- helpers -------------------------------------------------------------------------

    async def _deliver(
        self,
        sid: str,
        message: str,
        policy: TurnPolicy,
        schema: JSONObject | None,
        principal: Principal,
    ) -> ReceiptBody:
        delivered = self.runtime.deliver(
            sid, message, turn_policy=policy, output_schema=schema, by=Owners.by(principal)
        )
        return self._received(sid, await self._call(delivered, sid))

    def _received(self, sid: str, receipt: Receipt) -> ReceiptBody:
        """A message's receipt as answered, counted, its session driven unless refused."""
        out = receipt_body(receipt)
        self.metrics.deliveries.labels(out["disposition"]).inc()
        if out["disposition"] != "rejected":
            self.supervisor.kick(sid)
        else:
            self.settings.log(f"session {sid}: delivery rejected: {out.get('reason')}")
        return out

    async def _owned(self, request: Request) -> str:
        """The path's session id, when it is the caller's (another's is told it does not
        exist: 404, as an unknown id)."""
        sid = self._session_id(request)
        try:
            await self.owners.check(principal_of(request.scope), sid)
        except NotOwned:
            raise self._answer(SessionNotFoundError(sid), sid) from None
        except Exception as exc:
            raise self._answer(exc, sid) from None
        return sid

    def _session_id(self, request: Request) -> str:
        """The path's session id; a sub-agent's session can be read, not written to."""
        sid = str(request.path_params["sid"])
        if is_session_id(sid, child=request.method == "GET"):
            return sid
        if (root := parent_of(sid)) is not None:
            raise ChannelError(
                400,
                f"session {sid} is a sub-agent's: its parent's turn drives it, so it takes "
                f"no requests; send them to session {root}",
            )
        raise ChannelError(400, f"malformed session id {sid!r}")

    async def _view(
        self, sid: str, turns: int | None = 0, from_turn: int | None = None
    ) -> SessionView:
        """The session's view (no turns unless asked: see `Runtime.session`); raises 404 when
        it does not exist."""
        view: SessionView = await self._call_sync(
            lambda: self.runtime.session(sid, turns, from_turn), sid
        )
        return view

    async def _check_pending(
        self, sid: str, responses: Sequence[Mapping[str, Any]], principal: Principal
    ) -> None:
        """Answer only requests that are pending in this session (409 otherwise); an approval
        or an interrupted call's outcome needs the ``approve`` scope (a question ``send``)."""
        view = await self._view(sid)
        pending = {str(p.get("requestId", p.get("id"))) for p in view.get("pending", [])}
        for response in responses:
            if response["requestId"] not in pending:
                raise ChannelError(
                    409,
                    f"request {response['requestId']!r} is not pending in session {sid}; "
                    "GET the session to see its pending requests",
                )
        check(principal, answer_scope(list(view.get("pending", [])), responses))

    async def _call_sync(self, call: Callable[[], Any], sid: str | None = None) -> Any:
        """A sync facade call, made where the world wants it (`Runtime.call`: off the loop on
        a network world); its errors answered as HTTP."""
        try:
            return await self.runtime.call(call)
        except Exception as exc:
            raise self._answer(exc, sid) from None

    async def _call(self, call: Awaitable[Any], sid: str | None = None) -> Any:
        try:
            return await call
        except ChannelError:
            raise
        except Exception as exc:
            raise self._answer(exc, sid) from None

    def _answer(self, exc: Exception, sid: str | None) -> Exception:
        """The HTTP answer to a facade exception (a 5xx one is logged in one line); an
        exception of no known meaning is a bug and is raised unchanged (:class:`CatchAll`
        logs its traceback and answers 500)."""
        mapped = from_runtime_error(exc, sid)
        if mapped is None:
            return exc
        if mapped.status >= 500:
            self.settings.log(f"session {sid}: {mapped.message}" if sid else mapped.message)
        return mapped

    async def _json(self, request: Request, allow_empty: bool = False) -> JSONObject:
        return await read_json(
            request, self.settings.max_body, allow_empty, timeout=self.settings.body_timeout
        )


def _verifiers(settings: ChannelSettings) -> Verifiers:
    """The server's verifiers: its settings' own, with ``token`` as one of every scope."""
    verifiers = settings.auth or Verifiers()
    if settings.token:
        tokens = verifiers.tokens or StaticTokens()
        tokens.add(settings.token, OPERATOR)
        verifiers.tokens = tokens
    return verifiers


class Rejected(ErrorBody):
    """The body of a 409: a delivery the runtime refused, and why."""

    sessionId: str
    disposition: str
    reason: str


def _rejected(sid: str, receipt: ReceiptBody) -> JSONResponse:
    """409 for a delivery the runtime refused; the body says so and why."""
    reason = receipt.get("reason") or "the session does not accept this now"
    body: Rejected = {**error_body("rejected", reason), "sessionId": sid,
                      "disposition": "rejected", "reason": reason}  # fmt: skip
    return JSONResponse(body, 409)


def _page_asked(request: Request) -> tuple[int | None, int | None]:
    """The page of turns ``GET /session/{id}`` asks for, as (how many, from which): the latest
    :data:`PAGE` by default; ``?fromTurn=N``: the turns from number N on; ``?turns=K`` (or
    ``all``): K of them. The answer has ``turnCount``, ``turnsFrom`` and ``earlier``."""
    first = _turn_number(request.query_params.get("fromTurn"), "fromTurn")
    asked = request.query_params.get("turns")
    if asked == "all":
        return None, first
    if asked is not None:
        return _turn_number(asked, "turns", 0), first
    return (PAGE if first is None else None), first


def _earlier(start: int) -> str | None:
    """The query of the page before one starting at turn ``start`` (None: it is the first)."""
    before = min(start - 1, PAGE)
    return f"?fromTurn={start - before}&turns={before}" if before > 0 else None


def _turn_number(text: str | None, name: str, least: int = 1) -> int | None:
    """A query's turn number or count (None: not given); 400 when it is not one."""
    if text is None:
        return None
    if not (text.isdigit() and least <= int(text) < 10**9):
        raise ChannelError(400, f"{name} must be a whole number from {least}, not {text!r}")
    return int(text)
