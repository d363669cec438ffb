"""eve: a durable agent runtime.

User code imports from here (`from eve_cli import define_agent, tool`). Inside: the agent API
(`_agent_api`, `_tools`, `_loader`), the harness (one step, `harness/`), the execution layer
(driver / turn / step on `world`, `execution/`), the facade the CLI and channel call
(`runtime`), model providers (`eve_cli.models`), the HTTP channel and the command line
(`eve_cli.cli`). `eve_cli` depends on `world`, never the reverse.
"""

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
from eve_cli._version import __version__

__all__ = [
    "AgentConfig",
    "ApprovalPolicy",
    "Compaction",
    "Limits",
    "State",
    "ToolContext",
    "__version__",
    "always",
    "define_agent",
    "define_state",
    "never",
    "once",
    "tool",
]
