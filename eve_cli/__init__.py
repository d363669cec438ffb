"""eve: a durable agent runtime.

User code imports from here (`from eve_cli import define_agent, tool`). Inside: the agent API
(`_agent_api`, `_tools`, `_loader`), the harness (one step, `harness/`), the execution layer
(driver / turn / step on `world`, `execution/`), the facade the CLI and channel call
(`runtime`), model providers (`eve_cli.models`), the HTTP channel and the command line
(`eve_cli.cli`). `eve_cli` depends on `world`, never the reverse.

The agent API is imported on first use of one of its names, so a command that loads no agent
(`eve --version`, `eve inspect`) does not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eve_cli._version import __version__

if TYPE_CHECKING:
    from eve_cli._agent_api import (
        AgentConfig,
        ApprovalPolicy,
        Compaction,
        Limits,
        State,
        ToolContext,
        always,
        define_agent,
        define_state,
        never,
        once,
        tool,
    )
    from eve_cli._schedules import define_schedule
    from eve_cli.models import ModelReference, ModelSettings

__all__ = [
    "AgentConfig",
    "ApprovalPolicy",
    "Compaction",
    "Limits",
    "ModelReference",
    "ModelSettings",
    "State",
    "ToolContext",
    "__version__",
    "always",
    "define_agent",
    "define_schedule",
    "define_state",
    "never",
    "once",
    "tool",
]


def __getattr__(name: str) -> object:
    """The agent API's names, imported when first asked for (then cached in this module)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "define_schedule":  # schedules/<name>.py, beside the agent API
        from eve_cli import _schedules as module
    elif name in ("ModelReference", "ModelSettings"):
        from eve_cli import models as module  # type: ignore[no-redef]
    else:
        from eve_cli import _agent_api as module  # type: ignore[no-redef]

    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
