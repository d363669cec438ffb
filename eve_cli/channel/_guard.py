"""Who may talk to the server: the `Host` it is reached as, the `Origin` of a browser page, and
the content type of writes (SPEC §10: no web page can drive a loopback server).

A page on another site can send a "simple" request (a `text/plain` POST needs no preflight) and,
by rebinding its own DNS name to 127.0.0.1, read the answers. The three checks close both ways:

* `Host` must name the server as it is bound: a loopback name or address, the bound address, a
  configured name (`--allow-host`, `EVE_ALLOWED_HOSTS`), with the bound port if it names one
  (the name is what matters: a page's own port is checked by its origin). A rebound name
  never matches. An IP literal cannot be rebound, so a server bound to every address (0.0.0.0,
  ::; a token is then required) accepts any IP literal with its port.
* An `Origin` header must be the server's own (`http://<the Host sent>`: the browser view at `/`)
  or a configured one (`--allow-origin`, `EVE_ALLOWED_ORIGINS`); tools like httpx and curl send
  none.
* A request with a body-carrying method needs `Content-Type: application/json`: a page cannot
  send that cross-origin without a preflight, which a foreign origin does not pass.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Receive, Scope, Send

from eve_cli.channel._errors import error_response

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_WILDCARDS = ("0.0.0.0", "::", "")


@dataclass
class Peers:
    """The names the server answers to and the foreign origins it accepts.

    ``bound`` is set once the socket is bound (its port may have been 0 until then).
    """

    hosts: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()
    bound: tuple[str, int] | None = None
    _names: frozenset[str] = field(default=frozenset(), init=False, repr=False)

    def bind(self, host: str, port: int) -> None:
        """Record the address the socket is bound to."""
        self.bound = (host.strip("[]"), port)
        self._names = frozenset(_normal(n) for n in (*LOOPBACK_NAMES, host, *self.hosts))

    def host_problem(self, header: str | None) -> str | None:
        """Why ``header`` (a `Host` value) does not name this server; None when it does."""
        if self.bound is None or "*" in self.hosts:
            return None
        if not header:
            return "the request has no Host header"
        name, port = _split_host(header)
        address, bound_port = self.bound
        if port is not None and port != bound_port:
            return f"Host {header!r} names port {port}, the server listens on {bound_port}"
        if _normal(name) in self._names:
            return None
        if address in _WILDCARDS and _is_ip(name):
            return None
        return (
            f"Host {header!r} is not a name this server is bound as; "
            "to serve it under that name, pass --allow-host NAME (or set EVE_ALLOWED_HOSTS)"
        )

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        """True for the server's own origin (the Host sent, already checked) or a configured
        one."""
        origin = origin.rstrip("/").lower()
        if host and origin in (f"http://{host.lower()}", f"https://{host.lower()}"):
            return True
        return "*" in self.origins or origin in (o.rstrip("/").lower() for o in self.origins)


class RequestGuard:
    """ASGI middleware applying :class:`Peers` and the JSON content type of writes."""

    def __init__(self, app: ASGIApp, peers: Peers) -> None:
        self.app = app
        self.peers = peers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        problem = self.peers.host_problem(host)
        status = 421
        origin = headers.get("origin")
        if problem is None and origin is not None and not self.peers.origin_allowed(origin, host):
            problem = (
                f"requests from the web page at {origin!r} are refused; to allow it, start the "
                "server with --allow-origin ORIGIN (or set EVE_ALLOWED_ORIGINS)"
            )
            status = 403
        if problem is None and scope["method"] == "POST":
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json" and not (
                media.startswith("application/") and media.endswith("+json")
            ):
                problem = (
                    f"{scope['method']} needs 'Content-Type: application/json' "
                    f"(got {media or 'none'!r}), even with an empty body"
                )
                status = 415
        if problem is not None:
            await error_response(status, problem)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    """The headers this guard reads (the first of each)."""
    wanted = (b"host", b"origin", b"content-type")
    out: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name in wanted and name.decode() not in out:
            out[name.decode()] = value.decode("latin-1")
    return out


def _split_host(header: str) -> tuple[str, int | None]:
    """``(name, port)`` of a `Host` value (None when absent; -1 when unreadable)."""
    header = header.strip()
    if header.startswith("["):
        name, _, rest = header.partition("]")
        name += "]"
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port_text = header.rpartition(":") if ":" in header else (header, "", "")
    if not port_text:
        return name, None
    return name, int(port_text) if port_text.isdigit() else -1


def _normal(name: str) -> str:
    """A host name compared case-blind, IPv6 literals without brackets."""
    return name.strip().strip("[]").lower().rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True
