"""Migrations of records a user of the world provides (`MigrationStep`), whichever store
holds them: a store migrating to a format hands each journal record to the steps registered
for that format, whole, before storing it in the new form."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ._errors import StoreFormatError
from ._family import GAP, START_TYPES, Family
from ._records import JournalRecord, StoredRecord

if TYPE_CHECKING:
    from ._world import World


@dataclass
class MigratingRecord:
    """One journal record on its way to the new format, whole (`{run, t, g, at, ...}`).

    A step changes `record` in place; `drop()` leaves it out of the new journal. `input` is
    the input of the run's current generation as already migrated (a `start`/`gen` record's
    own input is in `record`). `world` reads streams, which a migration leaves as they are;
    a step may append to one (idempotently: a migration cut short runs again), never when
    `dry_run`. `notes`: one dict per family, kept across its records (what a step read once).
    """

    family: str
    record: JournalRecord
    workflow: str
    input: Any
    world: World
    notes: dict[str, Any]
    dry_run: bool = False
    dropped: bool = False

    def drop(self) -> None:
        self.dropped = True


@dataclass(frozen=True)
class MigrationStep:
    """A part of the migration to store format `version` that a user of the world provides:
    `record` is called with every journal record of every family, in journal order."""

    version: int
    name: str
    record: Callable[[MigratingRecord], None]


_STEPS: dict[str, MigrationStep] = {}


def register_migration_step(step: MigrationStep) -> None:
    """Add `step` to the migration to `step.version` (registering a name again replaces it)."""
    _STEPS[step.name] = step


def steps_for(version: int) -> list[MigrationStep]:
    return [s for s in _STEPS.values() if s.version == version]


@dataclass
class MigrationReport:
    """What a migration did (or, dry, would do), said in one line by `str()`."""

    path: str
    from_version: int
    to_version: int
    dry_run: bool = False
    families: int = 0
    records: int = 0
    dropped: int = 0
    deliveries: int = 0  # inbox items rewritten in the current form
    steps: list[str] = field(default_factory=list)
    resumed: bool = False  # a migration cut short past its commit, finished by this open

    def __str__(self) -> str:
        if self.resumed:
            return (
                f"{self.path}: finished migrating store format {self.from_version} -> "
                f"{self.to_version} (cut short before): {_count(self.families, 'run family')}"
            )
        did = "would migrate" if self.dry_run else "migrated"
        tail = " (dry run: nothing changed)" if self.dry_run else ""
        return (
            f"{self.path}: {did} store format {self.from_version} -> {self.to_version}: "
            f"{_count(self.families, 'run family')}, {_count(self.records, 'journal record')} "
            f"rewritten ({self.dropped} superseded left out), "
            f"{_count(self.deliveries, 'delivery')} rewritten"
            f"{tail}"
        )


def _count(n: int, noun: str) -> str:
    if n == 1:
        return f"1 {noun}"
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {plural}"


def migrating_record(
    world: World,
    root: str,
    rec: JournalRecord,
    new: Family,
    notes: dict[str, Any],
    *,
    dry_run: bool,
) -> MigratingRecord:
    """`rec` as the steps see it: with its run's workflow and current input (as migrated)."""
    run = new.runs.get(rec["run"])
    workflow = rec.get("workflow") or (run.workflow if run else "")
    given = rec.get("input") if rec["t"] in START_TYPES else (run.input if run else None)
    return MigratingRecord(root, rec, workflow, given, world, notes, dry_run)


# -- a world whose record forms are current (PostgresWorld): the registered steps alone -------


def run_steps(
    world: World, root: str, records: list[tuple[int, StoredRecord]], version: int
) -> tuple[list[tuple[int, StoredRecord]], Family]:
    """The records of family `root` that the steps registered for `version` change, stored
    again at their positions, and the family as it then reads. For a world whose record forms
    were already the current ones when it came (PostgresWorld, `_pg_schema` migration 5),
    where only its user's payloads can be older; a step may not drop a record there."""
    steps = steps_for(version)
    old, new, notes = Family(root), Family(root), dict[str, Any]()
    changed: list[tuple[int, StoredRecord]] = []
    for pos, stored in records:
        rec = old.apply(pos, stored)
        if steps and rec.get("t") != GAP and "run" in rec:
            before = copy.deepcopy(rec)
            migrating = migrating_record(world, root, rec, new, notes, dry_run=False)
            for step in steps:
                step.record(migrating)
            if migrating.dropped:
                raise StoreFormatError(f"run family {root}: a migration step left out a record")
            if migrating.record != before:
                run = new.runs.get(rec["run"])
                whole = "run" in stored or (run is None and rec["t"] not in START_TYPES)
                stored = (
                    cast(StoredRecord, migrating.record)
                    if whole
                    else new.pack(migrating.record, run.gen_at if run is not None else 0.0)
                )
                changed.append((pos, stored))
        new.apply(pos, stored)
    return changed, new
