"""How an MCP server's tool is named for the model: ``mcp__<server>__<tool>``.

Server names hold no ``__`` (checked at load), so the server is the part before the first
``__`` after the prefix; local tool names may not start with the prefix (checked by the
loader), so the two never collide. The tool part keeps the letters, digits, ``_`` and ``-``
that every model API accepts; a name over :data:`MAX_NAME` characters is cut and ends in a
digest of the MCP name, so two long names stay apart.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "mcp__"
MAX_NAME = 64  # what OpenAI's and Anthropic's function names allow
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def exposed_name(server: str, tool: str) -> str:
    """The model's name for ``tool`` of ``server``."""
    name = f"{PREFIX}{server}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME and name[len(PREFIX) + len(server) + 2 :] == tool:
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def server_of(name: str) -> str | None:
    """The server a model's tool name belongs to (None: not an MCP tool name)."""
    if not name.startswith(PREFIX):
        return None
    server, sep, rest = name[len(PREFIX) :].partition("__")
    return server if sep and server and rest else None
