"""The browser view (SPEC §14): `/` serves one HTML page, its script and its style sheet.

The three files are part of this package (``web/``), written by hand with no build step, and
read once when the channel is made: nothing is fetched at run time, no CDN is named. They hold
no data, so they are served without a token; the page reads and acts only through the JSON
routes under ``/eve/v1``, with the bearer token the person types in (kept in the tab's
``sessionStorage``), so it has no powers the API does not have. A strict Content-Security-Policy
lets the page run only its own script and talk only to its own origin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from eve_cli._version import __version__

WEB_DIR = Path(__file__).parent / "web"

# Path → (file under WEB_DIR, media type).
_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/view/eve.js": ("eve.js", "text/javascript; charset=utf-8"),
    "/view/eve.css": ("eve.css", "text/css; charset=utf-8"),
}

# Paths that need no token: the page's own files reveal nothing stored.
WEB_PATHS = frozenset(_FILES)


def _headers(connect: tuple[str, ...]) -> dict[str, str]:
    """The page's headers; ``connect``: origins besides its own it may call (the issuer it
    logs in with)."""
    sources = " ".join(("'self'", *connect))
    return {
        "content-security-policy": (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            f"connect-src {sources}; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"
        ),
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "cache-control": "no-cache",
    }


def web_routes(connect: tuple[str, ...] = ()) -> list[Route]:
    """The routes serving the page's files (each read once, here); ``connect``: origins the
    page may call besides its own."""
    headers = _headers(connect)
    routes = []
    for path, (name, media) in _FILES.items():
        body = (WEB_DIR / name).read_bytes()
        if name == "index.html":
            # The script and style URLs carry the version: an upgraded server's page is fetched
            # afresh, never mixed with a cached older script.
            body = body.replace(b"{{version}}", __version__.encode())
        routes.append(Route(path, _serve(body, media, headers), methods=["GET"]))
    return routes


def _serve(
    body: bytes, media: str, headers: dict[str, str]
) -> Callable[[Request], Awaitable[Response]]:
    async def serve(request: Request) -> Response:
        return Response(body, media_type=media, headers=headers)

    return serve
