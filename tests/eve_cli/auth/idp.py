"""A small OpenID Connect issuer on 127.0.0.1 for the tests: discovery, a JWKS that can be
rotated or made to fail, an authorization endpoint that logs a named user in at once, and a
token endpoint that checks the PKCE verifier. Tokens are signed with PyJWT."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa


@dataclass
class SigningKey:
    kid: str
    alg: str  # RS256 | ES256
    private: Any = field(repr=False)

    @classmethod
    def new(cls, alg: str = "RS256") -> SigningKey:
        private = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if alg == "RS256"
            else ec.generate_private_key(ec.SECP256R1())
        )
        return cls(f"k-{secrets.token_hex(4)}", alg, private)

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        public = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "alg": self.alg, "use": "sig"}


class Issuer:
    """The issuer: ``url`` once started; ``mint(...)`` makes tokens; ``keys`` is the JWKS."""

    def __init__(self, audience: str = "eve") -> None:
        self.audience = audience
        self.keys = [SigningKey.new("RS256"), SigningKey.new("ES256")]
        self.failing = False  # the JWKS answers 500 while True
        self.jwks_fetches = 0
        self.users: dict[str, dict[str, Any]] = {}  # login name -> extra claims
        self.login_as = "alice"  # who the authorization endpoint logs in (no form: at once)
        self._codes: dict[str, dict[str, Any]] = {}
        self._server = _IssuerServer(("127.0.0.1", 0), _Handler)
        self._server.issuer = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Issuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def mint(self, sub: str, key: SigningKey | None = None, **claims: Any) -> str:
        key = key or self.keys[0]
        now = int(time.time())
        body = {"iss": self.url, "aud": self.audience, "sub": sub, "iat": now,
                "exp": now + 300, **claims}  # fmt: skip
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key.private, algorithm=key.alg, headers={"kid": key.kid})

    def rotate(self) -> SigningKey:
        """A new RS256 key replaces the first one (the old one leaves the JWKS)."""
        self.keys[0] = SigningKey.new("RS256")
        return self.keys[0]

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "jwks_uri": f"{self.url}/jwks.json",
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        }


class _IssuerServer(ThreadingHTTPServer):
    issuer: Issuer


class _Handler(BaseHTTPRequestHandler):
    server: _IssuerServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path)
        if path.path == "/.well-known/openid-configuration":
            self._json(200, self.server.issuer.discovery())
        elif path.path == "/jwks.json":
            self._jwks()
        elif path.path == "/authorize":
            self._authorize(parse_qs(path.query))
        else:
            self._json(404, {"error": "not found"})

    def _jwks(self) -> None:
        self.server.issuer.jwks_fetches += 1
        if self.server.issuer.failing:
            self._json(500, {"error": "down"})
        else:
            self._json(200, {"keys": [k.jwk() for k in self.server.issuer.keys]})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        if urlsplit(self.path).path != "/token":
            self._json(404, {"error": "not found"})
            return
        self._token({k: v[0] for k, v in form.items()})

    def _authorize(self, query: dict[str, list[str]]) -> None:
        one = {k: v[0] for k, v in query.items()}
        user = one.get("login_hint") or self.server.issuer.login_as
        code = secrets.token_urlsafe(16)
        self.server.issuer._codes[code] = {**one, "user": user}
        target = (
            one["redirect_uri"] + "?" + urlencode({"code": code, "state": one.get("state", "")})
        )
        self.send_response(302)
        self.send_header("location", target)
        self.end_headers()

    def _token(self, form: dict[str, str]) -> None:
        asked = self.server.issuer._codes.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        expected = {"code_challenge": challenge.rstrip(b"=").decode(),
                    "redirect_uri": form.get("redirect_uri"),
                    "client_id": form.get("client_id")}  # fmt: skip
        if asked is None or any(asked.get(k) != v for k, v in expected.items()):
            self._json(400, {"error": "invalid_grant"})
            return
        user = asked["user"]
        token = self.server.issuer.mint(user, **self.server.issuer.users.get(user, {}))
        self._json(200, {"access_token": token, "token_type": "Bearer",
                         "expires_in": 300, "id_token": token})  # fmt: skip

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("access-control-allow-origin", "*")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_OPTIONS(self) -> None:
        self.send_response(204)
        self.send_header("access-control-allow-origin", "*")
        self.send_header("access-control-allow-headers", "content-type")
        self.send_header("access-control-allow-methods", "GET, POST")
        self.end_headers()
