"""JWT bearer tokens (RS256, ES256, HS256) checked with PyJWT: signature against a key of the
JWKS (or a shared HS256 secret), issuer, audience, expiry and not-before with a clock skew.

The algorithm is never taken from the token alone: it must be one this server accepts, and
the key must be of that algorithm's type (an RSA key never verifies an HS256 token), so
``alg: none`` and HS/RS confusion are refused before any signature is checked.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jwt

from eve_cli._json import JSONObject
from eve_cli.auth._principal import Principal, Refused
from eve_cli.auth._static import parse_scopes

ASYMMETRIC = ("RS256", "ES256")
_KEY_TYPES = {"RS256": "RSA", "ES256": "EC", "HS256": "oct"}


class KeySource(Protocol):
    async def key(self, kid: str | None) -> jwt.PyJWK | None: ...

    def fresh(self) -> bool: ...


# Tokens verified lately, by digest: a client sends the same token with every request (the
# browser view polls each second), and checking its signature again finds the same answer
# while the keys are fresh. Each is kept at most KEEP_VERIFIED seconds and never past its
# `exp`; the digest, not the token, is the key.
KEEP_VERIFIED = 60.0
_VERIFIED_MAX = 4096


@dataclass
class JwtRules:
    """What a token must say: issuer, audience, skew, where the tenant and scopes are."""

    issuer: str | None = None
    audience: str | tuple[str, ...] | None = None
    leeway: float = 30.0
    algorithms: tuple[str, ...] = ASYMMETRIC
    tenant_claim: str = "tenant"
    scope_prefix: str = ""  # e.g. "eve:" when the issuer names scopes "eve:read"
    default_scopes: frozenset[str] = field(default_factory=lambda: frozenset({"read", "send"}))


class JwtVerifier:
    """Verifies a JWT and makes its principal (``sub``, the tenant claim, the scopes)."""

    def __init__(
        self, rules: JwtRules, keys: KeySource | None = None, secret: str | None = None
    ) -> None:
        if keys is None and secret is None:
            raise ValueError("a JWT verifier needs a JWKS (file, URL or issuer) or a secret")
        unknown = set(rules.algorithms) - set(_KEY_TYPES)
        if unknown:
            raise ValueError(f"unsupported JWT algorithm(s) {sorted(unknown)}: RS256, ES256, HS256")
        self.rules, self.keys = rules, keys
        self._secret = jwt.PyJWK({"kty": "oct", "k": _b64(secret)}, "HS256") if secret else None
        accepted = set(rules.algorithms) | ({"HS256"} if secret else set())
        self.accepted = tuple(sorted(accepted))
        self._verified: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()

    async def verify(self, token: str) -> Principal:
        """The token's principal, or :class:`Refused` saying what is wrong with it."""
        digest = hashlib.sha256(token.encode()).digest()
        kept = self._verified.get(digest)
        if kept is not None and time.time() < kept[1] and (self.keys is None or self.keys.fresh()):
            return kept[0]
        principal = await self._verify(token)
        exp = principal.claims["exp"]  # a number: PyJWT checked it
        until = time.time() + KEEP_VERIFIED
        if isinstance(exp, int | float):
            until = min(float(exp), until)
        self._verified[digest] = (principal, until)
        if len(self._verified) > _VERIFIED_MAX:
            self._verified.popitem(last=False)
        return principal

    async def _verify(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Refused("malformed JWT") from None
        alg = header.get("alg")
        if alg not in self.accepted:
            raise Refused(f"JWT algorithm {alg!r} is not accepted (accepted: "
                          f"{', '.join(self.accepted)})")  # fmt: skip
        key = await self._key(alg, header.get("kid"))
        claims = self._decode(token, key, alg)
        return self._principal(claims)

    async def _key(self, alg: str, kid: Any) -> jwt.PyJWK:
        if alg == "HS256" and self._secret is not None:
            return self._secret
        found = await self.keys.key(kid if isinstance(kid, str) else None) if self.keys else None
        if found is None:
            raise Refused(f"JWT signed with an unknown key (kid {kid!r})")
        if _KEY_TYPES[alg] != _kty(found) or (found.algorithm_name not in (alg, None)):
            raise Refused(f"JWT algorithm {alg!r} does not match its key (kid {kid!r})")
        return found

    def _decode(self, token: str, key: jwt.PyJWK, alg: str) -> JSONObject:
        rules = self.rules
        required = ["exp", "sub"] + (["iss"] if rules.issuer else [])
        try:
            claims: JSONObject = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=rules.audience,
                issuer=rules.issuer,
                leeway=rules.leeway,
                options={"require": required, "verify_aud": rules.audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise Refused("JWT expired") from None
        except jwt.ImmatureSignatureError:
            raise Refused("JWT not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise Refused(f"JWT audience is not {rules.audience!r}", 403) from None
        except jwt.InvalidIssuerError:
            raise Refused(f"JWT issuer is not {rules.issuer!r}") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Refused(f"JWT has no {exc.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise Refused("JWT signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise Refused(f"JWT refused: {type(exc).__name__}") from None
        return claims

    def _principal(self, claims: JSONObject) -> Principal:
        rules = self.rules
        named = _scope_names(claims)
        if named is None:
            scopes = rules.default_scopes
        else:
            prefix = rules.scope_prefix
            ours = [n[len(prefix) :] for n in named if n.startswith(prefix)]
            scopes = parse_scopes(n for n in ours if n in ("read", "send", "approve", "admin"))
        tenant = claims.get(rules.tenant_claim)
        return Principal(str(claims["sub"]), str(tenant) if tenant else None, scopes, claims=claims)


def _scope_names(claims: JSONObject) -> Sequence[str] | None:
    """The scope names a token carries (``scope``, ``scp`` or ``scopes``); None: none said."""
    for name in ("scope", "scp", "scopes"):
        value = claims.get(name)
        if isinstance(value, str):
            return value.split()
        if isinstance(value, list):
            return [str(v) for v in value]
    return None


def _kty(key: jwt.PyJWK) -> str:
    return {"RSA": "RSA", "EC": "EC", "oct": "oct"}.get(str(key.key_type), str(key.key_type))


def _b64(secret: str) -> str:
    import base64

    return base64.urlsafe_b64encode(secret.encode()).rstrip(b"=").decode()
