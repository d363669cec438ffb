"""Settings from the environment plus ``.env`` and ``.env.local`` in the working directory.

Precedence: the process environment wins over ``.env.local``, which wins over ``.env``. The files
are only read; what they hold (API keys) lives in memory and is never written anywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["EnvFileError", "load_env", "parse_env_file"]

ENV_FILES = (".env", ".env.local")

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "$": "$"}


class EnvFileError(ValueError):
    """A ``.env`` file has a line that is not ``KEY=VALUE``; the message names file and line."""


def load_env(
    directory: Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Merge ``.env``, ``.env.local`` (both in ``directory``, default cwd) and ``environ``.

    Raises:
        EnvFileError: a file has a malformed line.
    """
    base = Path.cwd() if directory is None else directory
    merged: dict[str, str] = {}
    for name in ENV_FILES:
        path = base / name
        if path.is_file():
            merged.update(parse_env_file(path))
    merged.update(os.environ if environ is None else environ)
    return merged


def parse_env_file(path: Path) -> dict[str, str]:
    """Parse one dotenv file: ``KEY=VALUE`` lines, ``export`` prefixes, quotes and comments.

    Single-quoted values are literal; double-quoted values may span lines and understand
    ``\\n``-style escapes; unquoted values end at `` #``.
    """
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    values: dict[str, str] = {}
    number = 0
    while number < len(lines):
        line = lines[number].strip()
        start = number + 1
        number += 1
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, raw = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise EnvFileError(f"{path}:{start}: expected KEY=VALUE, got {_preview(line)}")
        raw = raw.strip()
        quote = raw[:1]
        if quote in ("'", '"'):
            # A double-quoted value may continue on the following lines.
            body = raw[1:]
            while _closing_quote(body, quote) < 0 and quote == '"' and number < len(lines):
                body += "\n" + lines[number]
                number += 1
            end = _closing_quote(body, quote)
            if end < 0:
                raise EnvFileError(f"{path}:{start}: value of {key} has no closing {quote}")
            text = body[:end]
            values[key] = _unescape(text) if quote == '"' else text
        else:
            values[key] = raw.split(" #", 1)[0].rstrip()
    return values


def _closing_quote(body: str, quote: str) -> int:
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\" and quote == '"':
            index += 2
            continue
        if char == quote:
            return index
        index += 1
    return -1


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), text)


def _preview(line: str) -> str:
    # Show the start of the line only: a malformed line may still hold a secret.
    head = re.split(r"[\s=]", line, maxsplit=1)[0][:20]
    return repr(head + ("…" if len(line) > len(head) else ""))
