"""Signing keys for JWTs: a JWKS file, a JWKS URL, or the URL an OIDC issuer's discovery
document names; fetched keys are kept and used until they expire.

A URL's keys are fetched again every ``refresh`` seconds and at once (at most every
``min_gap`` seconds) for a key id not known yet (a rotated key). When a fetch fails the keys
fetched last are used until ``keep`` seconds after that fetch; then, and when no fetch ever
succeeded, verification answers 503 with the reason.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jwt

from eve_cli._json import JSONObject, JSONValue
from eve_cli.auth._principal import Refused

FETCH_TIMEOUT = 5.0


class KeySet:
    """Keys by key id (``None``: a key with no ``kid``), from one JWKS document."""

    def __init__(self, document: Any, where: str) -> None:
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise ValueError(f"{where}: not a JWKS document (an object with a 'keys' list)")
        self.keys: dict[str | None, jwt.PyJWK] = {}
        for entry in document["keys"]:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWTError:  # a key type or curve this library cannot use: skipped
                continue
            self.keys[entry.get("kid")] = key
        if not self.keys:
            raise ValueError(f"{where}: the JWKS has no signing key eve can use")

    def find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid in self.keys:
            return self.keys[kid]
        # A token without a kid matches the only key of a set of one.
        return next(iter(self.keys.values())) if kid is None and len(self.keys) == 1 else None


class FileKeys:
    """A JWKS file, read again when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[float, int] | None = None
        self._set: KeySet | None = None
        self.load()  # a bad file stops `eve start`

    def load(self) -> KeySet:
        try:
            stat = self.path.stat()
            mark = (stat.st_mtime, stat.st_size)
            if self._set is None or mark != self._seen:
                document = json.loads(self.path.read_text(encoding="utf-8"))
                self._set, self._seen = KeySet(document, str(self.path)), mark
        except (OSError, ValueError) as exc:
            if self._set is None:
                raise ValueError(f"{self.path}: cannot read the JWKS: {exc}") from None
        assert self._set is not None
        return self._set

    async def key(self, kid: str | None) -> jwt.PyJWK | None:
        return self.load().find(kid)

    def fresh(self) -> bool:
        """Whether the kept keys need no fetch now (a file's are read when it changes)."""
        return True


class UrlKeys:
    """A JWKS URL (or an issuer whose discovery document names it), fetched and kept."""

    def __init__(
        self,
        url: str | None = None,
        *,
        issuer: str | None = None,
        refresh: float = 300.0,
        keep: float = 3600.0,
        min_gap: float = 1.0,
        log: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (url is None) == (issuer is None):
            raise ValueError("give a JWKS URL or an issuer to discover it from")
        self.url, self.issuer = url, issuer
        self.refresh, self.keep, self.min_gap = refresh, keep, min(min_gap, refresh)
        self.log, self.clock = log, clock
        self.discovery: JSONObject | None = None
        self._set: KeySet | None = None
        self._fetched = -1e18  # when the kept keys were fetched
        self._tried = -1e18  # when a fetch was last tried
        self._problem = "not fetched yet"
        self._lock = asyncio.Lock()

    def fresh(self) -> bool:
        """Whether the kept keys need no fetch now (none is due)."""
        return self._set is not None and self.clock() - self._fetched <= self.refresh

    async def key(self, kid: str | None) -> jwt.PyJWK | None:
        now = self.clock()
        found = self._set.find(kid) if self._set is not None else None
        wanted = found is None or now - self._fetched > self.refresh
        if wanted and now - self._tried > self.min_gap:
            await self._fetch()
            found = self._set.find(kid) if self._set is not None else None
        if self._set is None or self.clock() - self._fetched > self.keep:
            where = self.url or f"the issuer {self.issuer}"
            raise Refused(
                f"cannot verify tokens now: the signing keys from {where} could not be "
                f"fetched ({self._problem}); try again later",
                503,
            )
        return found

    async def _fetch(self) -> None:
        async with self._lock:
            if self.clock() - self._tried <= self.min_gap:  # another request just did
                return
            self._tried = self.clock()
            try:
                async with httpx.AsyncClient(timeout=FETCH_TIMEOUT) as client:
                    url = self.url or await self._discover(client)
                    answer = await client.get(url)
                    answer.raise_for_status()
                    self._set = KeySet(answer.json(), url)
                self._fetched, self._problem = self.clock(), ""
            except (httpx.HTTPError, ValueError) as exc:
                self._problem = _reason(exc)
                self.log(f"auth: fetching the signing keys failed: {self._problem}")

    async def _discover(self, client: httpx.AsyncClient) -> str:
        """The issuer's ``jwks_uri`` (its discovery document is read once)."""
        if self.discovery is None:
            assert self.issuer is not None
            found = await discover(client, self.issuer)
            self.discovery = found
        return str(self.discovery["jwks_uri"])


async def discover(client: httpx.AsyncClient, issuer: str) -> JSONObject:
    """The OIDC discovery document of ``issuer``, checked to name that issuer."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    answer = await client.get(url)
    answer.raise_for_status()
    document: JSONValue = answer.json()
    if not isinstance(document, dict) or not isinstance(document.get("jwks_uri"), str):
        raise ValueError(f"{url}: no jwks_uri in the discovery document")
    if document.get("issuer") != issuer:
        raise ValueError(f"{url}: names issuer {document.get('issuer')!r}, not {issuer!r}")
    return document


def _reason(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"{exc.request.url} answered {exc.response.status_code}"
    if isinstance(exc, httpx.HTTPError):
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return str(exc)
