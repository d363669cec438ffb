"""Durable execution substrate: workflows, steps, hooks, sleeps, child runs and streams.

`world` knows nothing about agents or models and imports nothing from `eve_cli`. Storage
backends sit behind one interface (`World`, `_world`), one sub-package each under `stores/`:
`LocalWorld` (`stores/local/`, files under `.workflow-data/`) is the default, `MemoryWorld`
(`stores/memory.py`) serves tests, `PostgresWorld` (`stores/postgres/`) is imported on first use,
so psycopg loads only then. The core: `_codec` (values ↔ msgpack), `_journal` (checksummed
frames), `_family` / `_engine` / `_context` (replay and driving), `_fork` (a family copied as of
a checkpoint), `_migrations` (record migrations a user registers), `_findings` (what checking a
store finds), `_presence` (who uses a shared store), `_select` (a world from a URL or a
directory), `_errors`, `_faults` (fault injection for crash tests, `EVE_FAULTS`).
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
    StoreUnavailableError,
    WorkflowNotFoundError,
    WorldError,
)
from ._findings import Finding
from ._fork import ForkPlan
from ._migrations import MigratingRecord, MigrationReport, MigrationStep, register_migration_step
from ._presence import Member, Presence
from ._records import JournalRecord
from ._select import StoreIdentity, open_world, store_identity
from ._world import (
    FamilyHead,
    FamilyLog,
    FamilyUsage,
    InboxItem,
    Lease,
    LostItem,
    World,
    check_name,
    check_run_id,
    root_of,
    stream_family,
)
from .stores.local import LocalWorld, default_data_dir
from .stores.local.verify import repair, verify
from .stores.memory import MemoryWorld
from .stores.postgres.urls import is_database_url, redact_url

if TYPE_CHECKING:
    from .stores.postgres.world import PostgresWorld

__all__ = [
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
    "Member",
    "MemoryWorld",
    "MigratingRecord",
    "MigrationReport",
    "MigrationStep",
    "NoActiveRunError",
    "OwnershipError",
    "PostgresWorld",
    "Presence",
    "RetryPolicy",
    "RunExistsError",
    "RunInfo",
    "RunNotFoundError",
    "SerializationError",
    "StepFailedError",
    "StepRun",
    "StorageError",
    "StoreFormatError",
    "StoreIdentity",
    "StoreUnavailableError",
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
    "store_identity",
    "stream_family",
    "verify",
]


def __getattr__(name: str) -> object:
    if name == "PostgresWorld":  # imported on first use: psycopg costs startup time
        from ._select import postgres_world

        return postgres_world()
    raise AttributeError(f"module 'world' has no attribute {name!r}")
