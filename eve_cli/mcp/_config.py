"""MCP servers as an agent declares them: ``mcp.json`` in its folder (the ``mcpServers`` format
MCP clients share) and ``define_agent(mcp_servers=...)``.

Nothing here starts a server or imports the SDK. ``${VAR}`` / ``${VAR:-default}`` references
stay unexpanded in a :class:`ServerSpec`; :func:`expand` resolves them from the environment
when a server starts, and the values live only in that process's memory (SPEC §4 D8).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eve_cli._agent_api import ApprovalPolicy, always, as_policy, never, once

CONFIG_FILE = "mcp.json"
DEFAULT_TIMEOUT = 60.0  # seconds a call may take before it is a tool error
START_TIMEOUT = 10.0  # seconds a server has to start (initialize), and to list its tools
_NAME = re.compile(r"[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_POLICIES = {"never": never, "always": always, "once": once}
_KNOWN = {
    "type", "command", "args", "env", "cwd", "url", "headers",
    "allow", "deny", "approval", "timeout", "startTimeout", "disabled",
}  # fmt: skip


class McpConfigError(ValueError):
    """A server declaration is unusable; ``str()`` starts with ``file:line:``."""


class MissingVariableError(ValueError):
    """A ``${VAR}`` of a server has no value in the environment (and no default)."""


@dataclass(frozen=True)
class ServerSpec:
    """One declared server, as written (references unexpanded).

    ``command``/``args``/``env``/``cwd`` for a stdio server, ``url``/``headers`` for Streamable
    HTTP. ``allow`` (None: every tool) and ``deny`` filter its tools by their MCP names;
    ``approval`` is the server's policy, ``tool_approval`` per tool (MCP name); ``timeout``
    the seconds a call may take, ``tool_timeout`` per tool; ``start_timeout`` the seconds the
    server has to answer ``initialize`` and to list its tools.
    """

    name: str
    base_dir: Path
    source: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()
    approval: ApprovalPolicy = field(default_factory=never)
    tool_approval: tuple[tuple[str, ApprovalPolicy], ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    tool_timeout: tuple[tuple[str, float], ...] = ()
    start_timeout: float = START_TIMEOUT

    @property
    def kind(self) -> str:
        return "stdio" if self.command is not None else "http"

    def launch_key(self) -> tuple[Any, ...]:
        """What identifies the running server: an edit to any of it starts a new one."""
        return (
            str(self.base_dir), self.name, self.command, self.args, self.env, self.cwd,
            self.url, self.headers,
        )  # fmt: skip

    def allows(self, tool: str) -> bool:
        return tool not in self.deny and (self.allow is None or tool in self.allow)

    def policy(self, tool: str) -> ApprovalPolicy:
        return dict(self.tool_approval).get(tool, self.approval)

    def timeout_for(self, tool: str) -> float:
        return dict(self.tool_timeout).get(tool, self.timeout)


@dataclass(frozen=True)
class Launch:
    """A server's launch settings with every reference expanded (memory only: they may hold
    secrets). ``secrets``: the expanded values, to be hidden in what eve shows or stores."""

    spec: ServerSpec
    command: str | None
    args: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    url: str | None
    headers: dict[str, str]
    secrets: tuple[str, ...]

    def redact(self, text: str) -> str:
        """``text`` with every expanded value replaced by ``***``."""
        for value in sorted(self.secrets, key=len, reverse=True):
            if len(value) >= 4:
                text = text.replace(value, "***")
        return text


def load_servers(
    directory: Path, declared: Mapping[str, Any] | None = None, where: str = ""
) -> tuple[ServerSpec, ...]:
    """The servers of an agent folder: its ``mcp.json`` and those ``define_agent`` declared
    (``where``: its ``file:line``); a name in both is an error.

    Raises:
        McpConfigError: a declaration is malformed (names file and line).
    """
    found: dict[str, ServerSpec] = {}
    path = directory / CONFIG_FILE
    if path.is_file():
        for spec in _from_file(path, directory):
            found[spec.name] = spec
    for name, body in (declared or {}).items():
        source = where or "define_agent"
        if name in found:
            raise McpConfigError(
                f"{source}: MCP server {name!r} is declared in {path} too; keep one of them"
            )
        declared_spec = parse_server(name, body, directory, source)
        if declared_spec is not None:
            found[name] = declared_spec
    return tuple(found.values())


def _from_file(path: Path, directory: Path) -> list[ServerSpec]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f'{path}:1: expected {{"mcpServers": {{"<name>": {{...}}}}}}')
    specs = []
    for name, body in servers.items():
        spec = parse_server(name, body, directory, f"{path}:{_line_of(text, name)}")
        if spec is not None:
            specs.append(spec)
    return specs


def _line_of(text: str, name: str) -> int:
    at = text.find(json.dumps(name))
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def parse_server(name: Any, body: Any, directory: Path, source: str) -> ServerSpec | None:
    """One server declaration (None when it says ``"disabled": true``).

    Raises:
        McpConfigError: naming ``source`` and what is wrong.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 32:
        raise McpConfigError(
            f"{source}: MCP server name {name!r}: use letters, digits, - and single _ "
            "(at most 32 characters)"
        )
    where = f"{source}: MCP server {name!r}"
    if not isinstance(body, Mapping):
        raise McpConfigError(f"{where}: expected an object with command or url")
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise McpConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if body.get("disabled") is True:
        return None
    command, url = body.get("command"), body.get("url")
    if (command is None) == (url is None):
        raise McpConfigError(f"{where}: give either command (stdio) or url (Streamable HTTP)")
    kind = body.get("type")
    if kind not in (None, "stdio", "http", "streamable-http", "streamableHttp"):
        raise McpConfigError(f"{where}: type {kind!r}: eve speaks stdio and http")
    timeout, per_tool_timeout = _timeouts(body.get("timeout", DEFAULT_TIMEOUT), where)
    start_timeout, _ = _timeouts(body.get("startTimeout", START_TIMEOUT), where, "startTimeout")
    approval, per_tool = _approvals(body.get("approval"), where)
    allow = body.get("allow")
    return ServerSpec(
        name=name,
        base_dir=directory,
        source=source,
        command=_string(command, "command", where) if command is not None else None,
        args=tuple(_strings(body.get("args", []), "args", where)),
        env=tuple(_pairs(body.get("env", {}), "env", where)),
        cwd=_string(body["cwd"], "cwd", where) if body.get("cwd") is not None else None,
        url=_string(url, "url", where) if url is not None else None,
        headers=tuple(_pairs(body.get("headers", {}), "headers", where)),
        allow=frozenset(_strings(allow, "allow", where)) if allow is not None else None,
        deny=frozenset(_strings(body.get("deny", []), "deny", where)),
        approval=approval,
        tool_approval=per_tool,
        timeout=timeout,
        tool_timeout=per_tool_timeout,
        start_timeout=start_timeout,
    )


def _timeouts(
    value: Any, where: str, key: str = "timeout"
) -> tuple[float, tuple[tuple[str, float], ...]]:
    """``timeout``: seconds for every tool, or ``{"<tool>" | "*": seconds}``."""
    given = dict(value) if isinstance(value, Mapping) and key == "timeout" else {"*": value}
    for seconds in given.values():
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
            raise McpConfigError(f"{where}: {key} must be a positive number of seconds")
    default = float(given.pop("*", DEFAULT_TIMEOUT))
    return default, tuple(sorted((str(k), float(v)) for k, v in given.items()))


def _approvals(
    value: Any, where: str
) -> tuple[ApprovalPolicy, tuple[tuple[str, ApprovalPolicy], ...]]:
    """``approval``: a policy for every tool, or ``{"<tool>" | "*": policy}``."""
    if isinstance(value, Mapping):
        per_tool = {str(k): _policy(v, where) for k, v in value.items()}
        default = per_tool.pop("*", never())
        return default, tuple(sorted(per_tool.items(), key=lambda kv: kv[0]))
    return (_policy(value, where) if value is not None else never()), ()


def _policy(value: Any, where: str) -> ApprovalPolicy:
    if isinstance(value, str):
        if value not in _POLICIES:
            raise McpConfigError(f"{where}: approval {value!r}: use never, always or once")
        return _POLICIES[value]()
    try:
        return as_policy(value)
    except TypeError as exc:
        raise McpConfigError(f"{where}: {exc}") from None


def _string(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise McpConfigError(f"{where}: {what} must be a non-empty string")
    return value


def _strings(value: Any, what: str, where: str) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise McpConfigError(f"{where}: {what} must be a list of strings")
    return list(value)


def _pairs(value: Any, what: str, where: str) -> list[tuple[str, str]]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise McpConfigError(f"{where}: {what} must map names to strings")
    return sorted(value.items())


def expand(spec: ServerSpec, environ: Mapping[str, str]) -> Launch:
    """``spec`` with its ``${VAR}`` references resolved from ``environ``.

    Raises:
        MissingVariableError: a reference has no value and no ``:-default``.
    """
    secrets: list[str] = []

    def sub(text: str) -> str:
        def one(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            value = environ.get(name)
            if value is None:
                if default is None:
                    raise MissingVariableError(
                        f"MCP server {spec.name!r} ({spec.source}): ${{{name}}} is not set"
                    )
                return default
            secrets.append(value)
            return value

        return _VAR.sub(one, text)

    cwd = Path(sub(spec.cwd)) if spec.cwd else spec.base_dir
    return Launch(
        spec=spec,
        command=sub(spec.command) if spec.command is not None else None,
        args=tuple(sub(a) for a in spec.args),
        env={k: sub(v) for k, v in spec.env},
        cwd=cwd if cwd.is_absolute() else spec.base_dir / cwd,
        url=sub(spec.url) if spec.url is not None else None,
        headers={k: sub(v) for k, v in spec.headers},
        secrets=tuple(secrets),
    )
