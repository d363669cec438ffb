"""Durable execution substrate: workflows, steps, hooks, sleeps, child runs and streams.

`world` knows nothing about agents or models and imports nothing from `eve_cli`. Storage
backends sit behind one interface (`World`): `LocalWorld` (files under `.workflow-data/`) is the
default, `MemoryWorld` serves tests.
"""
