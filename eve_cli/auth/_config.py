"""How a server's verifiers are chosen: ``auth.py`` in the agent folder
(``auth = define_auth(...)``), overridden by `eve start` options and ``EVE_AUTH_*`` variables.

::

    from eve_cli.auth import Principal, define_auth

    auth = define_auth(
        issuer="https://login.example.com",      # OIDC discovery finds its JWKS
        audience="eve",
        client_id="eve-web",                      # the browser view logs in with the issuer
        tokens={"sha256:…": Principal("ci", scopes={"read", "send"})},
    )

A token is never written in a file: a static token is named by its SHA-256 digest
(`eve token`), an HS256 secret by the variable holding it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from eve_cli.auth._chain import CustomVerifier, OidcLogin, Verifiers
from eve_cli.auth._jwt import ASYMMETRIC, JwtRules, JwtVerifier, KeySource
from eve_cli.auth._keys import FileKeys, UrlKeys
from eve_cli.auth._principal import Principal
from eve_cli.auth._static import StaticTokens, parse_scopes

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class AuthSettings:
    """Which verifiers a server runs (see :func:`define_auth`)."""

    tokens: Mapping[str, Principal] = field(default_factory=dict)
    tokens_file: Path | None = None
    jwks: str | None = None
    issuer: str | None = None
    audience: str | tuple[str, ...] | None = None
    algorithms: tuple[str, ...] = ASYMMETRIC
    secret_env: str | None = None
    leeway: float = 30.0
    tenant_claim: str = "tenant"
    scope_prefix: str = ""
    default_scopes: frozenset[str] = frozenset({"read", "send"})
    client_id: str | None = None
    verify: CustomVerifier | None = None
    refresh: float = 300.0
    keep: float = 3600.0

    def build(self, log: Callable[[str], None]) -> Verifiers:
        """The verifiers (``log``: where a failed JWKS fetch is told). Raises ValueError for a
        setting that cannot work (one line)."""
        tokens = StaticTokens.from_file(self.tokens_file) if self.tokens_file else StaticTokens()
        for key, principal in self.tokens.items():
            tokens.add(key, principal)
        return Verifiers(tokens, self._jwt(log), self.verify, self._login())

    def _jwt(self, log: Callable[[str], None]) -> JwtVerifier | None:
        secret = os.environ.get(self.secret_env) if self.secret_env else None
        if self.secret_env and not secret:
            raise ValueError(f"the HS256 secret's variable {self.secret_env} is not set")
        if not (self.jwks or self.issuer or secret):
            return None
        rules = JwtRules(
            issuer=self.issuer,
            audience=self.audience,
            leeway=self.leeway,
            algorithms=self.algorithms,
            tenant_claim=self.tenant_claim,
            scope_prefix=self.scope_prefix,
            default_scopes=self.default_scopes,
        )
        keys: KeySource | None = None
        if self.jwks and not self.jwks.startswith(("http://", "https://")):
            keys = FileKeys(Path(self.jwks))
        elif self.jwks or self.issuer:
            url = self.jwks
            keys = UrlKeys(url, issuer=None if url else self.issuer,
                           refresh=self.refresh, keep=self.keep, log=log)  # fmt: skip
        return JwtVerifier(rules, keys, secret)

    def _login(self) -> OidcLogin | None:
        if self.client_id is None:
            return None
        if self.issuer is None:
            raise ValueError("a client id for the browser's login needs an issuer")
        return OidcLogin(self.issuer, self.client_id)

    def overridden(self, **given: object) -> AuthSettings:
        """These settings with the options given (None: not given) in their place."""
        changes = {k: v for k, v in given.items() if v is not None}
        return replace(self, **changes)  # type: ignore[arg-type]


def define_auth(
    *,
    tokens: Mapping[str, Principal] | None = None,
    jwks: str | None = None,
    issuer: str | None = None,
    audience: str | Iterable[str] | None = None,
    algorithms: Iterable[str] = ASYMMETRIC,
    secret_env: str | None = None,
    leeway: float = 30.0,
    tenant_claim: str = "tenant",
    scope_prefix: str = "",
    default_scopes: Iterable[str] = ("read", "send"),
    client_id: str | None = None,
    verify: CustomVerifier | None = None,
    refresh: float = 300.0,
    keep: float = 3600.0,
) -> AuthSettings:
    """Who may call the server (in the agent folder's ``auth.py``: ``auth = define_auth(...)``).

    Args:
        tokens: static tokens, each as its ``sha256:`` digest, with the principal it stands for.
        jwks: a JWKS URL or file the JWTs' signing keys come from.
        issuer: the tokens' ``iss``; without ``jwks``, its OIDC discovery names the JWKS.
        audience: the ``aud`` tokens must name.
        algorithms: the asymmetric algorithms accepted (RS256, ES256).
        secret_env: a variable holding an HS256 secret (HS256 is accepted only then).
        leeway: seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``.
        tenant_claim: the claim naming the principal's tenant (sessions shared by a tenant).
        scope_prefix: stripped from the token's scope names (``eve:read`` → ``read``).
        default_scopes: the scopes of a token that names none.
        client_id: the browser view's OIDC client (authorization code with PKCE).
        verify: a custom verifier: ``f(AuthRequest) -> Principal | None`` (sync or async);
            None or raising :class:`Refused` refuses.
        refresh: seconds between fetches of a JWKS URL.
        keep: seconds fetched keys are used when fetching again fails.
    """
    for key in tokens or {}:
        if not _DIGEST.fullmatch(key):
            raise ValueError(
                "define_auth(tokens=) names each token by its digest 'sha256:<hex>' "
                "(`eve token`), never the token itself"
            )
    audiences = (audience,) if isinstance(audience, str) else tuple(audience or ()) or None
    return AuthSettings(
        tokens=dict(tokens or {}),
        jwks=jwks,
        issuer=issuer,
        audience=audiences[0] if audiences and len(audiences) == 1 else audiences,
        algorithms=tuple(algorithms),
        secret_env=secret_env,
        leeway=leeway,
        tenant_claim=tenant_claim,
        scope_prefix=scope_prefix,
        default_scopes=parse_scopes(default_scopes),
        client_id=client_id,
        verify=verify,
        refresh=refresh,
        keep=keep,
    )


def load_auth(agent_dir: Path) -> AuthSettings:
    """The settings of ``agent_dir/auth.py`` (none there: no verifier of its own).
    Raises ValueError with ``file:line:`` for a broken file."""
    from eve_cli._loader import AgentLoadError, exec_user_file

    path = agent_dir / "auth.py"
    if not path.is_file():
        return AuthSettings()
    try:
        module = exec_user_file(path)
    except AgentLoadError as exc:
        raise ValueError(str(exc)) from None
    found = [v for v in vars(module).values() if isinstance(v, AuthSettings)]
    if len(found) != 1:
        raise ValueError(f"{path}:1: define `auth = define_auth(...)` (found {len(found)})")
    return found[0]
