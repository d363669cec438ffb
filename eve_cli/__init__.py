"""eve: a durable agent runtime.

User code imports from here (`from eve_cli import define_agent, tool`). Inside: the agent API,
the harness (one step), the execution layer (driver / turn / step on `world`), model providers
(`eve_cli.models`), the HTTP channel and the command line (`eve_cli.cli`). `eve_cli` depends on
`world`, never the reverse.
"""

from eve_cli._version import __version__

__all__ = ["__version__"]
