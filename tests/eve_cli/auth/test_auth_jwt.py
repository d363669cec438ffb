"""JWTs checked against a real issuer on 127.0.0.1 (discovery, JWKS, rotation, failure):
each bad token is one clear refusal with the right status, never the token in it."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from eve_cli.auth import AuthRequest, Principal, Refused, Verifiers, define_auth
from tests.eve_cli.auth.idp import Issuer, SigningKey


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as running:
        yield running


def verify(verifiers: Verifiers, token: str | None) -> Principal:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return asyncio.run(verifiers.verify(AuthRequest(token, headers, "GET", "/eve/v1/sessions")))


def refusal(verifiers: Verifiers, token: str | None) -> Refused:
    with pytest.raises(Refused) as refused:
        verify(verifiers, token)
    assert token is None or token not in str(refused.value)
    assert "\n" not in str(refused.value)
    return refused.value


def discovered(issuer: Issuer, **options: object) -> Verifiers:
    settings = define_auth(issuer=issuer.url, audience="eve", **options)  # type: ignore[arg-type]
    return settings.build(lambda line: None)


def test_rs256_and_es256_tokens_from_a_discovered_issuer_make_principals(issuer: Issuer) -> None:
    verifiers = discovered(issuer)
    alice = verify(verifiers, issuer.mint("alice", scope="read send approve", tenant="acme"))
    assert (alice.subject, alice.tenant, alice.scopes) == (
        "alice", "acme", frozenset({"read", "send", "approve"})
    )  # fmt: skip
    bob = verify(verifiers, issuer.mint("bob", key=issuer.keys[1]))  # ES256, no scope claim
    assert (bob.subject, bob.tenant, bob.scopes) == ("bob", None, frozenset({"read", "send"}))
    assert issuer.jwks_fetches == 1  # kept, not fetched per request


def test_expired_not_yet_valid_wrong_audience_and_issuer_are_refused(issuer: Issuer) -> None:
    verifiers = discovered(issuer, leeway=5)
    now = int(time.time())
    assert "expired" in str(refusal(verifiers, issuer.mint("a", exp=now - 60)))
    assert verify(verifiers, issuer.mint("a", exp=now - 2)).subject == "a"  # within the skew
    assert "not valid yet" in str(refusal(verifiers, issuer.mint("a", nbf=now + 60)))
    wrong_aud = refusal(verifiers, issuer.mint("a", aud="other"))
    assert wrong_aud.status == 403 and "audience" in str(wrong_aud)
    assert "issuer" in str(refusal(verifiers, issuer.mint("a", iss="http://elsewhere")))
    assert "'exp'" in str(refusal(verifiers, issuer.mint("a", exp=None)))
    assert "'sub'" in str(refusal(verifiers, issuer.mint(None)))  # type: ignore[arg-type]


def test_wrong_signature_alg_none_and_hs_rs_confusion_are_refused(issuer: Issuer) -> None:
    verifiers = discovered(issuer)
    good = issuer.mint("alice")
    head, _, sig = good.split(".")
    forged_body = _b64(json.dumps({**jwt.decode(good, options={"verify_signature": False}),
                                   "sub": "admin"}).encode())  # fmt: skip
    assert refusal(verifiers, f"{head}.{forged_body}.{sig}").status == 401
    none = jwt.encode({"sub": "admin", "aud": "eve", "iss": issuer.url,
                       "exp": int(time.time()) + 60}, "", algorithm="none")  # fmt: skip
    assert "'none' is not accepted" in str(refusal(verifiers, none))
    # HS256 signed with the RSA public key as its secret (the classic confusion).
    public_pem = (
        issuer.keys[0]
        .private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    confused = _hs256(
        {"sub": "admin", "aud": "eve", "iss": issuer.url, "exp": int(time.time()) + 60},
        public_pem, issuer.keys[0].kid,
    )  # fmt: skip
    assert "'HS256' is not accepted" in str(refusal(verifiers, confused))
    # A server that does accept HS256 (a secret of its own) still refuses it for an RSA kid.
    both = define_auth(issuer=issuer.url, audience="eve", algorithms=("RS256", "HS256"))
    assert "does not match its key" in str(refusal(both.build(print), confused))


def test_a_rotated_key_is_fetched_and_an_unknown_one_refused(issuer: Issuer) -> None:
    verifiers = discovered(issuer, refresh=3600)
    assert verify(verifiers, issuer.mint("alice")).subject == "alice"
    new = issuer.rotate()
    # Made before: a key takes a while to make on a loaded machine, and the flood below
    # must come within the second after the fetch.
    stranger = SigningKey.new("RS256")
    flood = [issuer.mint("alice", key=stranger) for _ in range(2)]
    time.sleep(1.1)  # unknown key ids fetch the JWKS again at most once a second
    assert verify(verifiers, issuer.mint("alice", key=new)).subject == "alice"
    assert issuer.jwks_fetches == 2
    for token in flood:
        assert "unknown key" in str(refusal(verifiers, token))
    assert issuer.jwks_fetches == 2  # a flood of unknown ids does not flood the issuer


def test_an_unfetchable_jwks_keeps_cached_keys_until_they_expire_then_503(issuer: Issuer) -> None:
    lines: list[str] = []
    settings = define_auth(issuer=issuer.url, audience="eve", refresh=0.2, keep=1.0)
    verifiers = settings.build(lines.append)
    token = issuer.mint("alice")
    assert verify(verifiers, token).subject == "alice"
    issuer.failing = True
    time.sleep(0.3)
    assert verify(verifiers, token).subject == "alice"  # refetch failed: cached keys serve
    assert any("fetching the signing keys failed" in line for line in lines)
    time.sleep(1.0)
    down = refusal(verifiers, token)
    assert down.status == 503 and "could not be fetched" in str(down)
    issuer.failing = False
    time.sleep(0.3)
    assert verify(verifiers, token).subject == "alice"  # back once the issuer is


def test_a_jwks_file_and_an_hs256_secret(issuer: Issuer, tmp_path: object,
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from pathlib import Path

    jwks = Path(str(tmp_path)) / "jwks.json"
    jwks.write_text(json.dumps({"keys": [k.jwk() for k in issuer.keys]}))
    monkeypatch.setenv("TEST_SECRET", "s3cret-s3cret-s3cret-s3cret-s3cret!")
    verifiers = define_auth(jwks=str(jwks), audience="eve", secret_env="TEST_SECRET").build(print)
    assert verify(verifiers, issuer.mint("carol", key=issuer.keys[1])).subject == "carol"
    hs = jwt.encode({"sub": "dan", "aud": "eve", "exp": int(time.time()) + 60},
                    "s3cret-s3cret-s3cret-s3cret-s3cret!", algorithm="HS256")  # fmt: skip
    assert verify(verifiers, hs).subject == "dan"
    wrong = jwt.encode({"sub": "dan", "aud": "eve", "exp": int(time.time()) + 60},
                       "another-secret-another-secret-xx!", algorithm="HS256")  # fmt: skip
    assert "signature" in str(refusal(verifiers, wrong))


def test_static_tokens_and_a_custom_verifier() -> None:
    from eve_cli.auth import digest

    def custom(request: AuthRequest) -> Principal | None:
        if request.headers.get("x-test-user") == "erin":
            return Principal("erin", scopes=frozenset({"read"}))
        if request.token == "tok-suspended":
            raise Refused("this user is suspended", 403)
        return None

    settings = define_auth(
        tokens={digest("tok-1"): Principal("ci", scopes=frozenset({"read"}))}, verify=custom
    )
    verifiers = settings.build(print)
    assert verify(verifiers, "tok-1").subject == "ci"
    assert "bad bearer token" in str(refusal(verifiers, "tok-2"))
    assert refusal(verifiers, "tok-suspended").status == 403
    request = AuthRequest(None, {"x-test-user": "erin"}, "GET", "/")
    assert asyncio.run(verifiers.verify(request)).subject == "erin"
    assert "missing bearer token" in str(refusal(verifiers, None))
    with pytest.raises(ValueError, match="digest"):
        define_auth(tokens={"tok-1": Principal("ci")})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hs256(claims: dict[str, object], secret: bytes, kid: str) -> str:
    import hashlib
    import hmac

    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"
