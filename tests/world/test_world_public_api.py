"""The public surface of `world` changes only on purpose."""

import world


def test_exported_names_are_pinned() -> None:
    assert sorted(world.__all__) == [
        "ChildFailedError", "ChildHandle", "CorruptJournalError", "Delivery", "DivergenceError",
        "Engine", "FamilyHead", "FamilyLog", "FamilyUsage", "FatalError", "Finding", "ForkError",
        "ForkPlan", "HookConflictError",
        "HookHandle", "InboxItem",
        "InvalidNameError", "JournalRecord", "Lease", "LocalWorld", "LostItem",
        "Member", "MemoryWorld",
        "MigratingRecord", "MigrationReport", "MigrationStep", "NoActiveRunError",
        "OwnershipError", "PostgresWorld", "Presence", "RetryPolicy",
        "RunExistsError", "RunInfo", "RunNotFoundError", "STORAGE_ERRORS", "SerializationError",
        "StepFailedError", "StepRun",
        "StorageError", "StoreFormatError", "StoreIdentity", "StoreUnavailableError", "Workflow",
        "WorkflowContext", "WorkflowNotFoundError",
        "World",
        "WorldError", "check_name", "check_run_id", "current_step", "decode", "default_data_dir",
        "encode",
        "is_database_url", "open_world", "redact_url", "register_migration_step", "repair",
        "root_of", "store_identity", "stream_family",
        "verify",
    ]  # fmt: skip
    for name in world.__all__:
        assert getattr(world, name) is not None


def test_every_error_is_a_world_error_except_fatal() -> None:
    errors = [n for n in world.__all__ if n.endswith("Error")]
    assert len(errors) == 18
    for name in errors:
        assert issubclass(getattr(world, name), world.WorldError) == (name != "FatalError")
