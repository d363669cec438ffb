"""Static bearer tokens with scopes: `EVE_AUTH_TOKEN` (every scope), a tokens file, or tokens
named in the agent folder's ``auth.py``.

Only a SHA-256 digest of each token is held: a file lists digests, never tokens, and a token
given in memory is digested at once. A request's token is digested and looked up, so the
comparison's time says nothing about any stored token.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from eve_cli.auth._principal import SCOPES, Principal

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def digest(token: str) -> str:
    """``sha256:<hex>`` of ``token``: what a tokens file lists (`eve token`)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class StaticTokens:
    """A verifier of fixed tokens, each standing for one principal."""

    def __init__(self, tokens: Mapping[str, Principal] | None = None) -> None:
        self._by_digest: dict[str, Principal] = {}
        for token, principal in (tokens or {}).items():
            self.add(token, principal)

    def add(self, token_or_digest: str, principal: Principal) -> None:
        """Accept a token (or its ``sha256:`` digest) as ``principal``."""
        key = token_or_digest if _DIGEST.fullmatch(token_or_digest) else digest(token_or_digest)
        self._by_digest[key] = principal

    def __len__(self) -> int:
        return len(self._by_digest)

    def verify(self, token: str) -> Principal | None:
        """The token's principal; None when it is not one of these (another verifier may
        know it)."""
        return self._by_digest.get(digest(token))

    @classmethod
    def from_file(cls, path: Path) -> StaticTokens:
        """Read a tokens file: one token a line, ``sha256:<hex> SUBJECT [tenant=T]
        [scopes=read,send]`` (default scopes: read and send); ``#`` starts a comment.
        Raises ValueError naming the file and line of a bad one."""
        tokens = cls()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"{path}: cannot read the tokens file: {exc.strerror}") from None
        for number, line in enumerate(text.splitlines(), 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            try:
                tokens.add(*_line(words))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from None
        return tokens


def _line(words: list[str]) -> tuple[str, Principal]:
    if len(words) < 2 or not _DIGEST.fullmatch(words[0]):
        raise ValueError(
            "expected 'sha256:<64 hex digits> SUBJECT [tenant=T] [scopes=read,send]' "
            "(a digest, never the token: `eve token` prints it)"
        )
    options = dict(word.partition("=")[::2] for word in words[2:])
    unknown = set(options) - {"tenant", "scopes"}
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}: tenant=, scopes=")
    scopes = parse_scopes(options.get("scopes", "read,send").split(","))
    return words[0], Principal(words[1], options.get("tenant") or None, scopes)


def parse_scopes(names: Iterable[str]) -> frozenset[str]:
    """The scopes named (ValueError for one eve does not know)."""
    scopes = frozenset(n.strip() for n in names if n.strip())
    unknown = scopes - set(SCOPES)
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(sorted(unknown))}: use {', '.join(SCOPES)}")
    return scopes
