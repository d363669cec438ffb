"""Fixtures for runtime tests (helpers live in rt_support.py)."""

from tests.eve_cli.rt_support import make_agent

__all__ = ["make_agent"]
