"""Durable execution substrate: workflows, steps, hooks, sleeps, child runs and streams.

`world` knows nothing about agents or models and imports nothing from `eve_cli`. Storage
backends sit behind one interface (`World`): `LocalWorld` (files under `.workflow-data/`) is the
default, `MemoryWorld` serves tests. Modules: `_codec` (values ↔ msgpack), `_journal`
(checksummed record files), `_world` (the storage interface), `local` / `memory` (backends),
`_streams` (stream files), `_family` / `_engine` / `_context` (replay and driving), `_errors`,
`_faults` (fault injection for crash tests, `EVE_FAULTS`), `_verify` (checking and safely
repairing a data directory: what `eve doctor` runs).
"""

from ._codec import decode, encode
from ._context import ChildHandle, HookHandle, RetryPolicy, WorkflowContext
from ._engine import Engine, RunInfo, Workflow
from ._errors import (
    ChildFailedError,
    CorruptJournalError,
    DivergenceError,
    FatalError,
    HookConflictError,
    InvalidNameError,
    NoActiveRunError,
    OwnershipError,
    RunExistsError,
    RunNotFoundError,
    SerializationError,
    StepFailedError,
    StorageError,
    WorkflowNotFoundError,
    WorldError,
)
from ._verify import Finding, repair, verify
from ._world import InboxItem, Lease, World
from .local import LocalWorld, default_data_dir
from .memory import MemoryWorld

__all__ = [
    "ChildFailedError",
    "ChildHandle",
    "CorruptJournalError",
    "DivergenceError",
    "Engine",
    "FatalError",
    "Finding",
    "HookConflictError",
    "HookHandle",
    "InboxItem",
    "InvalidNameError",
    "Lease",
    "LocalWorld",
    "MemoryWorld",
    "NoActiveRunError",
    "OwnershipError",
    "RetryPolicy",
    "RunExistsError",
    "RunInfo",
    "RunNotFoundError",
    "SerializationError",
    "StepFailedError",
    "StorageError",
    "Workflow",
    "WorkflowContext",
    "WorkflowNotFoundError",
    "World",
    "WorldError",
    "decode",
    "default_data_dir",
    "encode",
    "repair",
    "verify",
]
