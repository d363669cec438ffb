"""What verifying a request's principal costs (SPEC §18): the channel's `AuthGate` in front of
an endpoint that answers at once, driven in-process (no sockets: only the gate's work is
timed), with no verifier, a static token, and JWTs (RS256, ES256) whose keys were fetched
once from a JWKS URL on 127.0.0.1 and are kept.

* ``auth.verify_ms.<kind>``: median milliseconds per request over alternated batches, against
  no verifier in the same run (``baseline``); ``auth.added_ms.<kind>``: the difference, the
  cost verification adds to a request (budget: 0.2 ms for RS256). ``RS256`` / ``ES256``: a
  client sending its token again (verified tokens are kept by digest, up to 60 s);
  ``RS256.new`` / ``ES256.new``: a token never seen before each request (the signature
  checked).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, MutableMapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from eve_cli.auth import Principal, StaticTokens, Verifiers, define_auth
from eve_cli.channel._auth import AuthGate

from . import measurement
from ._support import median


def run(quick: bool) -> Iterator[dict[str, Any]]:
    batch, rounds = (200, 3) if quick else (2000, 9)
    keys = {"RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ES256": ec.generate_private_key(ec.SECP256R1())}  # fmt: skip
    server = _jwks_server(keys)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        timed = asyncio.run(_measure(url, keys, batch, rounds))
    finally:
        server.shutdown()
        server.server_close()
    base = median(timed["none"])
    for kind in ("static", "RS256", "ES256", "RS256.new", "ES256.new"):
        value = median(timed[kind])
        yield measurement(f"auth.verify_ms.{kind}", value, "ms", baseline=base)
        yield measurement(f"auth.added_ms.{kind}", value - base, "ms", budget=0.2)


async def _measure(
    url: str, keys: dict[str, Any], batch: int, rounds: int
) -> dict[str, list[float]]:
    now = int(time.time())

    def mint(alg: str, n: int = 0) -> str:
        claims = {"sub": "alice", "aud": "eve", "iss": "bench", "exp": now + 3600, "jti": str(n)}
        return jwt.encode(claims, keys[alg], algorithm=alg, headers={"kid": alg})

    tokens = {alg: mint(alg) for alg in keys}
    fresh = {f"{alg}.new": iter([mint(alg, n + 1) for n in range(batch * rounds + 1)])
             for alg in keys}  # fmt: skip
    by_jwt = define_auth(jwks=url, issuer="bench", audience="eve").build(lambda line: None)
    by_jwt.tokens = StaticTokens({"static-token": Principal("ci", scopes=frozenset({"read"}))})
    gated = AuthGate(_answer, by_jwt, print)
    gates = {"none": (AuthGate(_answer, Verifiers(), print), None),
             "static": (gated, "static-token"),
             **{alg: (gated, token) for alg, token in tokens.items()}}  # fmt: skip
    for gate, token in gates.values():  # keys fetched and kept before any timing
        await _request(gate, token)
    timed: dict[str, list[float]] = {kind: [] for kind in (*gates, *fresh)}
    for _ in range(rounds):
        for kind, (gate, token) in gates.items():  # alternated: load changes hit all alike
            start = time.perf_counter()
            for _ in range(batch):
                await _request(gate, token)
            timed[kind].append((time.perf_counter() - start) / batch * 1000)
        for kind, minted in fresh.items():
            new = [next(minted) for _ in range(batch)]
            start = time.perf_counter()
            for token in new:
                await _request(gated, token)
            timed[kind].append((time.perf_counter() - start) / batch * 1000)
    return timed


async def _request(gate: AuthGate, token: str | None) -> None:
    headers = [(b"host", b"127.0.0.1")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {"type": "http", "method": "GET", "path": "/eve/v1/sessions", "headers": headers,
             "query_string": b"", "client": ("127.0.0.1", 1)}  # fmt: skip
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await gate(scope, receive, send)
    if sent[0]["status"] != 200:
        raise RuntimeError(f"the bench request was refused: {sent}")


async def _answer(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _jwks_server(keys: dict[str, Any]) -> ThreadingHTTPServer:
    document = json.dumps({"keys": [
        {**json.loads(jwt.get_algorithm_by_name(alg).to_jwk(key.public_key())), "kid": alg,
         "alg": alg, "use": "sig"} for alg, key in keys.items()
    ]}).encode()  # fmt: skip

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(document)))
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
