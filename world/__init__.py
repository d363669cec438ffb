"""Durable execution substrate: workflows, steps, hooks, sleeps, child runs and streams.

`world` knows nothing about agents or models and imports nothing from `eve_cli`. Storage
backends sit behind one interface (`World`): `LocalWorld` (files under `.workflow-data/`) is the
default, `MemoryWorld` serves tests. Modules: `_codec` (values ↔ msgpack), `_journal`
(checksummed record files), `_world` (the storage interface), `local` / `memory` / `postgres`
(backends; `PostgresWorld` is imported on first use, so psycopg loads only then), `_pg_schema`
(its migrations), `_select` (a world from a URL or a directory), `_streams` (stream files),
`_family` / `_engine` / `_context` (replay and driving), `_fork` (a family copied as of a
checkpoint), `_errors`,
`_faults` (fault injection for crash tests, `EVE_FAULTS`), `_verify` (checking and safely
repairing a data directory: what `eve doctor` runs).
"""

from typing import TYPE_CHECKING

from ._codec import decode, encode
from ._context import ChildHandle, HookHandle, RetryPolicy, StepRun, WorkflowContext, current_step
from ._engine import Delivery, Engine, RunInfo, Workflow
from ._errors import (
    STORAGE_ERRORS,
    ChildFailedError,
    CorruptJournalError,
    DivergenceError,
    FatalError,
    ForkError,
    HookConflictError,
    InvalidNameError,
    NoActiveRunError,
    OwnershipError,
    RunExistsError,
    RunNotFoundError,
    SerializationError,
    StepFailedError,
    StorageError,
    StoreFormatError,
    WorkflowNotFoundError,
    WorldError,
)
from ._fork import ForkPlan
from ._migrate import MigratingRecord, MigrationReport, MigrationStep, register_migration_step
from ._records import JournalRecord
from ._select import is_database_url, open_world, redact_url
from ._verify import Finding, repair, verify
from ._world import (
    IO,
    LAZY,
    RECORD,
    FamilyHead,
    FamilyLog,
    FamilyUsage,
    InboxItem,
    Lease,
    LostItem,
    Order,
    World,
    check_name,
    check_run_id,
    root_of,
    stream_family,
)
from .local import LocalWorld, default_data_dir
from .memory import MemoryWorld

if TYPE_CHECKING:
    from .postgres import PostgresWorld

__all__ = [
    "IO",
    "LAZY",
    "RECORD",
    "STORAGE_ERRORS",
    "ChildFailedError",
    "ChildHandle",
    "CorruptJournalError",
    "Delivery",
    "DivergenceError",
    "Engine",
    "FamilyHead",
    "FamilyLog",
    "FamilyUsage",
    "FatalError",
    "Finding",
    "ForkError",
    "ForkPlan",
    "HookConflictError",
    "HookHandle",
    "InboxItem",
    "InvalidNameError",
    "JournalRecord",
    "Lease",
    "LocalWorld",
    "LostItem",
    "MemoryWorld",
    "MigratingRecord",
    "MigrationReport",
    "MigrationStep",
    "NoActiveRunError",
    "Order",
    "OwnershipError",
    "PostgresWorld",
    "RetryPolicy",
    "RunExistsError",
    "RunInfo",
    "RunNotFoundError",
    "SerializationError",
    "StepFailedError",
    "StepRun",
    "StorageError",
    "StoreFormatError",
    "Workflow",
    "WorkflowContext",
    "WorkflowNotFoundError",
    "World",
    "WorldError",
    "check_name",
    "check_run_id",
    "current_step",
    "decode",
    "default_data_dir",
    "encode",
    "is_database_url",
    "open_world",
    "redact_url",
    "register_migration_step",
    "repair",
    "root_of",
    "stream_family",
    "verify",
]


def __getattr__(name: str) -> object:
    if name == "PostgresWorld":  # imported on first use: psycopg costs startup time
        from ._select import postgres_world

        return postgres_world()
    raise AttributeError(f"module 'world' has no attribute {name!r}")
