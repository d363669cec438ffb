"""Fixtures for runtime tests (helpers live in rt_support.py)."""

from rt_support import make_agent

__all__ = ["make_agent"]
