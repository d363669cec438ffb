"""In-memory state of one run family, rebuilt from its journal and kept by the owning engine.

The journal is the truth (a `park` record says what a run waits on); the head is a status
cache for listing, and says where the current generations start (`scan`) so a load can skip
everything before them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ._world import InboxItem, World

HEAD_VERSION = 1
KEPT_CHILDREN = 10  # finished child runs the head keeps (the latest ones)
FINISHED = frozenset({"completed", "failed"})
# Record types that carry a run's progress (replayed in order by the workflow context).
START_TYPES = frozenset({"start", "gen"})
END_TYPES = frozenset({"done", "failed"})


@dataclass
class Run:
    """One run of the family as far as the loaded journal tells."""

    id: str
    workflow: str
    parent: str | None
    input: Any
    g: int = 0
    gen_pos: int = 0
    gen_at: float = 0.0
    gen_nc: int = 0
    seq: int = 0
    next_child: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"  # running | parked | completed | failed
    waiting: dict[str, Any] | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    hooks: set[str] = field(default_factory=set)
    meta: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    updated: float = 0.0
    last_pos: int = -1

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def begin(self, rec: dict[str, Any], pos: int) -> None:
        """Start a generation from a `start` or `gen` record."""
        self.g = rec.get("g", 0)
        self.input = rec.get("input")
        self.gen_pos = pos
        self.records = []
        self.status, self.waiting = "running", None
        self.gen_at = rec.get("at", 0.0)
        self.gen_nc = self.next_child = rec.get("nc", 0)
        self.hooks |= set(rec.get("hooks", ()))


@dataclass
class Family:
    """Every loaded run of one family plus its inbox consumption state."""

    root: str
    runs: dict[str, Run] = field(default_factory=dict)
    end: int = 0  # position of the last record seen
    watermark: int = 0  # every inbox item with id < watermark is consumed
    consumed: set[int] = field(default_factory=set)  # consumed ids >= watermark
    pending: list[InboxItem] = field(default_factory=list)
    inbox_next: int = 0
    inbox_mark: int = 0
    head_runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply(self, pos: int, rec: dict[str, Any]) -> None:
        """Fold one journal record into the state."""
        self.end = max(self.end, pos)
        kind, run_id = rec.get("t"), rec.get("run")
        if kind == "recv":
            self.consumed.update(rec.get("ids", ()))
        if not isinstance(run_id, str):
            return
        run = self.runs.get(run_id)
        if kind == "start" or (kind == "gen" and run is None):
            # A `gen` record repeats what `start` said, so a load may begin at either.
            run = Run(run_id, rec.get("workflow", ""), rec.get("parent"), rec.get("input"))
            run.meta = dict(rec.get("meta") or {})
            run.created = rec.get("created", rec.get("at", 0.0))
            self.runs[run_id] = run
        if run is None:
            return  # a finished run whose generation began before the scan start
        run.seq = max(run.seq, rec.get("seq", 0) + 1)
        run.updated = rec.get("at", run.updated)
        run.last_pos = pos
        if kind in START_TYPES:
            run.begin(rec, pos)
        elif kind == "done":
            run.status, run.result = "completed", rec.get("result")
        elif kind == "failed":
            run.status, run.error = "failed", rec.get("error")
        else:
            run.records.append(rec)
            if kind == "park":
                run.status, run.waiting = "parked", rec.get("waiting")
            else:
                run.status, run.waiting = "running", None
            if kind == "hook":
                run.hooks.add(rec["token"])
            elif kind == "child":
                run.next_child = max(run.next_child, int(rec["child"].rsplit(".", 1)[1]) + 1)

    def inbox_state(self) -> dict[str, Any]:
        """The consumption watermark carried by `start` and `gen` records."""
        unconsumed = [item.id for item in self.pending if item.id not in self.consumed]
        watermark = min(unconsumed, default=self.inbox_next)
        watermark = max(watermark, self.watermark)
        extra = sorted(i for i in self.consumed if i >= watermark)
        return {"w": watermark, "x": extra}

    def read_inbox(self, world: World) -> None:
        """Pick up deliveries that arrived since the last read."""
        end = world.inbox_end(self.root)
        if end == self.inbox_mark == self.inbox_next:
            return  # unchanged since a read that reached its end (a turn polls every step)
        self.inbox_mark = end
        items, self.inbox_next = world.read_inbox(self.root, self.inbox_next)
        self.pending.extend(items)

    def take(self, token: str, limit: int | None) -> list[InboxItem]:
        """Unconsumed deliveries for `token`, oldest first (not yet marked consumed)."""
        found = [i for i in self.pending if i.token == token and i.id not in self.consumed]
        return found if limit is None else found[:limit]

    def consume(self, ids: list[int]) -> None:
        self.consumed.update(ids)
        taken = set(ids)
        self.pending = [i for i in self.pending if i.id not in taken]

    def scan_start(self) -> int:
        """Where a later load may begin: the earliest current generation still needed."""
        starts = [r.gen_pos for r in self.runs.values() if not r.finished]
        return min(starts, default=self.end + 1)


def load_family(world: World, root: str, *, full: bool = False) -> Family:
    """Rebuild a family from its journal, starting where the head says it may (or at 0)."""
    head = None if full else world.read_head(root)
    start = head.get("scan", 0) if head and head.get("v") == HEAD_VERSION else 0
    log = world.load(root, start) if start else world.load(root, 0)
    if log.start and not (log.records and _is_scan_start(log.records[0][1])):
        log = world.load(root, 0)  # the hint pointed somewhere odd: read everything
    family = Family(root)
    if head and log.start:
        family.head_runs = dict(head.get("runs", {}))
    if log.start:
        inbox = log.records[0][1]["inbox"]
        family.watermark = inbox["w"]
        family.consumed = set(inbox["x"])
    family.inbox_next = family.watermark
    for pos, rec in log.records:
        family.apply(pos, rec)
    family.read_inbox(world)
    return family


def _is_scan_start(rec: dict[str, Any]) -> bool:
    return rec.get("t") in START_TYPES and isinstance(rec.get("inbox"), dict)


def build_head(family: Family) -> dict[str, Any]:
    """The status cache for `family` as the engine leaves it.

    Finished child runs beyond the latest `KEPT_CHILDREN` are left out (a session makes a
    child per turn; the head must not grow with turns); `Engine.info` finds them in the
    journal.
    """
    runs = dict(family.head_runs)
    for run in family.runs.values():
        runs[run.id] = {
            "workflow": run.workflow,
            "parent": run.parent,
            "status": run.status,
            "waiting": run.waiting,
            "g": run.g,
            "created": run.created,
            "updated": run.updated,
            "meta": run.meta,
            "result": run.result if run.status == "completed" else None,
            "error": run.error,
        }
    done = [rid for rid, e in runs.items() if e.get("parent") and e.get("status") in FINISHED]
    done.sort(key=lambda rid: runs[rid].get("updated") or 0.0)
    for rid in done[: max(len(done) - KEPT_CHILDREN, 0)]:
        del runs[rid]
    return {
        "v": HEAD_VERSION,
        "end": family.end,
        "scan": family.scan_start(),
        "inbox_mark": family.inbox_mark,
        "inbox_next": family.inbox_next,  # where the last valid delivery read ends
        "written": time.time(),
        "runs": runs,
    }
