"""Agent folder → :class:`AgentDefinition`.

A folder holds ``agent.py`` (``agent = define_agent(...)``), optionally ``instructions.md``,
``tools/*.py`` and ``subagents/<name>/`` (nested folders of the same shape). Every problem is an
:class:`AgentLoadError` whose message starts with ``file:line:``. Files are executed afresh on
each load (never cached in ``sys.modules``), so an edited folder applies at the next load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback
import types
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from eve_cli._agent_api import AgentConfig, ToolFunction
from eve_cli._tools import (
    ASK_QUESTION,
    SLEEP,
    Tool,
    ToolDefinitionError,
    ask_question_tool,
    build_tool,
    sleep_tool,
)
from eve_cli.mcp import PREFIX as MCP_PREFIX
from eve_cli.mcp import McpConfigError, ServerSpec, load_servers, sdk_missing
from eve_cli.models import ModelSettings, Price, PriceTableError, load_prices, settings_problem

DEFAULT_AGENT_DIR = Path(__file__).resolve().parent / "_default_agent"
DEFAULT_MODEL = "demo"
_MODEL_FORMS = (
    "demo",
    "scripted:PATH",
    "openai:MODEL",
    "openai-responses:MODEL",
    "anthropic:MODEL",
)


class AgentLoadError(Exception):
    """The agent folder cannot be used; ``str()`` is one line starting with ``file:line:``."""


@dataclass(frozen=True)
class AgentDefinition:
    """An agent as loaded now: rebuilt at every turn, never persisted."""

    name: str
    directory: Path
    config: AgentConfig
    instructions: str
    tools: dict[str, Tool]
    subagents: dict[str, AgentDefinition] = field(default_factory=dict)
    mcp: tuple[ServerSpec, ...] = ()  # its MCP servers (mcp.json, define_agent(mcp_servers=))
    prices: dict[str, Price] = field(default_factory=dict)  # prices.json: model -> price
    digest: str = ""  # of the folder's code as loaded (`code_digest`): which code ran a turn

    @property
    def model(self) -> str:
        return self.config.model or DEFAULT_MODEL

    def settings_for(self, model: str) -> ModelSettings:
        """The settings of this agent's model calls on ``model``: the agent's, and its model
        reference's when ``model`` is that reference's."""
        config = self.config
        if config.model is None or model != config.model:
            return config.settings
        return config.settings.merged(config.model_settings)

    @property
    def description(self) -> str:
        if self.config.description:
            return self.config.description
        first = self.instructions.strip().splitlines()
        return first[0][:200] if first else f"the {self.name} agent"


def check_model_string(model: str) -> str | None:
    """Why ``model`` is not a valid model string, or None when it is."""
    kind, sep, rest = model.partition(":")
    if (kind == "demo" and not sep) or (
        kind in ("scripted", "openai", "openai-responses", "anthropic") and rest
    ):
        return None
    return f"unknown model {model!r}: use one of {', '.join(_MODEL_FORMS)}"


def resolve_agent_dir(agent_dir: Path | str | None) -> Path:
    """The folder to load: the given one, else ``./agent`` when present, else the default."""
    if agent_dir is not None:
        return Path(agent_dir).resolve()
    local = Path.cwd() / "agent"
    if (local / "agent.py").is_file():
        return local.resolve()
    return DEFAULT_AGENT_DIR


def load_agent(agent_dir: Path | str | None = None) -> AgentDefinition:
    """Load the agent folder (see :func:`resolve_agent_dir`)."""
    directory = resolve_agent_dir(agent_dir)
    return _load(directory, name=None, is_subagent=False)


def agent_model(directory: Path) -> str:
    """The model the agent folder ``directory`` runs on (its ``define_agent(model=)``, else
    the default), read from its ``agent.py`` alone: its tools, sub-agents and MCP servers
    are not loaded (what a read-only command shows needs no more)."""
    return _config(directory).model or DEFAULT_MODEL


def agent_name(directory: Path) -> str:
    """The name of the agent folder ``directory`` (its ``define_agent(name=)``, else the
    folder's), from its ``agent.py`` alone (listing its schedules needs no more): its tools,
    sub-agents and MCP servers are not loaded, but ``agent.py`` and its model (and
    ``prices.json``) are checked as a load of the folder checks them, with the same errors."""
    config = _config(directory)
    _model_parts(config, directory, _where(config, directory))
    return _name(config, directory, None)


def _where(config: AgentConfig, directory: Path) -> str:
    """``file:line`` of the folder's ``define_agent(...)`` (its errors start with it)."""
    return f"{config.source_file or directory / 'agent.py'}:{config.source_line or 1}"


def _name(config: AgentConfig, directory: Path, name: str | None) -> str:
    """The name the agent of ``directory`` goes by (``name``: a sub-agent's folder name)."""
    return config.name or ("default" if directory == DEFAULT_AGENT_DIR else name or directory.name)


def _config(directory: Path) -> AgentConfig:
    """The `AgentConfig` an agent folder's ``agent.py`` defines (none: the default one)."""
    agent_py = directory / "agent.py"
    if not directory.is_dir():
        raise AgentLoadError(f"{directory}: agent folder not found")
    if not agent_py.is_file() and not (directory / "instructions.md").is_file():
        raise AgentLoadError(f"{agent_py}:1: missing agent.py (or instructions.md)")
    return _defined(agent_py) if agent_py.is_file() else AgentConfig()


def _load(directory: Path, *, name: str | None, is_subagent: bool) -> AgentDefinition:
    config = _config(directory)
    where = _where(config, directory)
    prices = _model_parts(config, directory, where)
    instructions = _instructions(config, directory)
    if is_subagent and not instructions.strip():
        raise AgentLoadError(
            f"{where}: sub-agent {name!r} has no instructions: add instructions.md or "
            "define_agent(instructions=...)"
        )
    tools = _load_tools(directory / "tools", sleep=config.sleep)
    try:
        servers = load_servers(directory, config.mcp_servers, where)
    except McpConfigError as exc:
        raise AgentLoadError(str(exc)) from None
    if servers and (missing := sdk_missing()) is not None:
        raise AgentLoadError(f"{where}: the agent has MCP servers: {missing}")
    return AgentDefinition(
        name=_name(config, directory, name),
        directory=directory,
        config=replace(config, instructions=instructions),
        instructions=instructions,
        tools=tools,
        subagents=_load_subagents(directory / "subagents", tools),
        mcp=servers,
        prices=prices,
        digest="" if is_subagent else code_digest(directory),
    )


def _instructions(config: AgentConfig, directory: Path) -> str:
    """``define_agent(instructions=)``, else the folder's ``instructions.md``, else none."""
    md = directory / "instructions.md"
    if config.instructions is None and md.is_file():
        return md.read_text(encoding="utf-8")
    return config.instructions or ""


def _defined(agent_py: Path) -> AgentConfig:
    """The ``define_agent(...)`` result ``agent.py`` defines (as ``agent``, or its only one)."""
    module = exec_user_file(agent_py)
    found = getattr(module, "agent", None)
    if isinstance(found, AgentConfig):
        return found
    candidates = [v for v in vars(module).values() if isinstance(v, AgentConfig)]
    if len(candidates) != 1:
        raise AgentLoadError(
            f"{agent_py}:1: define `agent = define_agent(...)` (found "
            f"{len(candidates)} define_agent results)"
        )
    return candidates[0]


def _load_subagents(sub_root: Path, tools: Mapping[str, Tool]) -> dict[str, AgentDefinition]:
    """The sub-agents in ``sub_root``'s folders (not those starting ``_`` or ``.``)."""
    subagents: dict[str, AgentDefinition] = {}
    if not sub_root.is_dir():
        return subagents
    for sub in sorted(p for p in sub_root.iterdir() if p.is_dir()):
        if sub.name.startswith(("_", ".")):
            continue
        if sub.name in tools or sub.name == ASK_QUESTION:
            raise AgentLoadError(f"{sub}:1: sub-agent {sub.name!r} has the same name as a tool")
        subagents[sub.name] = _load(sub, name=sub.name, is_subagent=True)
    return subagents


_CODE = (".py", ".md", ".json", ".yaml", ".yml")


def code_digest(directory: Path) -> str:
    """A short digest of an agent folder's code (its files' paths and bytes, sub-agents and
    evals included): the same code in another place gives the same digest."""
    digest = hashlib.sha256()
    found: list[Path] = []
    for folder, subfolders, files in os.walk(directory):
        # Not code: caches, and hidden folders (a .venv, .git or .workflow-data inside it).
        subfolders[:] = [d for d in subfolders if d != "__pycache__" and not d.startswith(".")]
        found += [Path(folder, name) for name in files if Path(name).suffix in _CODE]
    for path in sorted(found):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _model_parts(config: AgentConfig, directory: Path, where: str) -> dict[str, Price]:
    """Check the model string and settings; the folder's ``prices.json`` entries."""
    if config.model is not None:
        problem = check_model_string(config.model)
        merged = config.settings.merged(config.model_settings)
        if problem or (problem := settings_problem(config.model, merged)):
            raise AgentLoadError(f"{where}: {problem}")
        provider = config.model.partition(":")[0]
        if config.provider_tools and provider not in ("anthropic", "openai-responses"):
            raise AgentLoadError(
                f"{where}: provider_tools need an anthropic: or openai-responses: model "
                f"({config.model} runs no tools itself)"
            )
    try:
        return load_prices(directory / "prices.json")
    except PriceTableError as exc:
        raise AgentLoadError(str(exc)) from None


def _load_tools(tools_dir: Path, *, sleep: bool) -> dict[str, Tool]:
    """The built-in tools and those of ``tools_dir``'s files; ``sleep``: with the built-in
    ``sleep`` tool."""
    tools = _user_tools(tools_dir)
    if sleep:
        if SLEEP in tools:
            raise AgentLoadError(
                f"{tools[SLEEP].source}: a tool named {SLEEP!r} clashes with the built-in one "
                "that define_agent(sleep=True) adds; rename it"
            )
        tools[SLEEP] = sleep_tool()
    return tools


def _user_tools(tools_dir: Path) -> dict[str, Tool]:
    tools: dict[str, Tool] = {ASK_QUESTION: ask_question_tool()}
    if not tools_dir.is_dir():
        return tools
    for path in sorted(tools_dir.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module = exec_user_file(path)
        for value in vars(module).values():
            if not isinstance(value, ToolFunction):
                continue
            line = getattr(getattr(value.fn, "__code__", None), "co_firstlineno", 1)
            where = f"{path}:{line}"
            if value.name.startswith(MCP_PREFIX):
                raise AgentLoadError(
                    f"{where}: tool name {value.name!r}: names starting {MCP_PREFIX!r} are "
                    "those of MCP servers' tools; rename it"
                )
            try:
                built = build_tool(value, where)
            except ToolDefinitionError as exc:
                raise AgentLoadError(str(exc)) from None
            if built.name in tools:
                first = tools[built.name].source
                raise AgentLoadError(
                    f"{where}: duplicate tool name {built.name!r} (first defined at {first}); "
                    "rename one of them"
                )
            tools[built.name] = built
    return tools


def exec_user_file(path: Path) -> types.ModuleType:
    """Execute one user file as a fresh module; errors name the file and line."""
    module_name = f"_eve_agent_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise AgentLoadError(f"{path}:1: cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    # Registered while executing so dataclasses / pydantic in user code can resolve the module.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise AgentLoadError(f"{path}:{exc.lineno or 1}: syntax error: {exc.msg}") from None
    except AgentLoadError:
        raise
    except Exception as exc:
        line = _line_in(path, exc)
        raise AgentLoadError(f"{path}:{line}: {type(exc).__name__}: {exc}") from None
    finally:
        sys.modules.pop(module_name, None)
    return module


def _line_in(path: Path, exc: BaseException) -> int:
    line = 1
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path and frame.lineno is not None:
            line = frame.lineno
    return line
