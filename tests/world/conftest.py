"""Fixtures for the world suite: `world`, `open_world` and `world_spec` (tests/conftest.py)
are one parameter per World implementation (tests/worlds.py)."""
