"""In-memory state of one run family, rebuilt from its journal and kept by the owning engine.

The journal is the truth (a `park` record says what a run waits on); the head is a status
cache for listing, and says where the current generations start (`scan`) so a load can skip
everything before them.

Records in memory are whole: `{run, g, at, t, ...}`. The journal stores them compact
(`Family.pack`; `Family.expand` makes them whole again), except a fork's copied records,
which are stored whole (they carry `run`; `_fork`):

* `r`: the run id after the root id and its dot (absent for the root run); a child's parent
  is implied by its id (`<parent>.<n>`), a record's generation by the run's last `start`/`gen`.
* `start`/`gen` carry `at` (seconds); every other record `d`, whole milliseconds since its
  run's generation began (`at = gen.at + d / 1000`).
* `recv` keeps the inbox ids and their records' checksums (`c`), not the token and payloads:
  they are read back from the inbox (append-only), and a missing or different delivery is a
  `CorruptJournalError` naming the inbox, never a different payload.
* `child` and a parked `waiting` name the child relative (as `r`); a parent records nothing
  when it reads a child's end (the child's `done`/`failed` is in the same journal, final).
* `gen` leaves out its workflow when it is the run's, meta and created (they live in the
  `start` record and the head, which a load beginning at a `gen` record has) and stores hex
  hook tokens as bytes; defaults are left out (nc 0, meta {}, hooks [], n 1).
* `start`/`gen` store the inbox state `{w, x}` as `w` alone when `x` is empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from ._errors import CorruptJournalError
from ._records import InboxState, JournalRecord, RunError, StoredRecord, Waiting
from ._store import scheduling
from ._world import InboxItem, World, pack_token, unpack_token

HEAD_VERSION = 1
# What to do about a family whose records a replay needs are gone (no repair brings them back).
CANNOT_GO_ON = (
    "the family can be read but not run on: start a new one (its earlier records stay readable)"
)
GAP = "gap"  # a record `eve doctor --repair` wrote over damaged bytes, of their length
KEPT_CHILDREN = 10  # finished child runs the head keeps (the latest ones)
FINISHED = frozenset({"completed", "failed"})
# JournalRecord types that carry a run's progress (replayed in order by the workflow context).
START_TYPES = frozenset({"start", "gen"})
# Keys of a whole record that its stored form leaves implied.
_IMPLIED = frozenset({"t", "run", "g", "seq", "at", "parent", "created"})
_UNSET = object()
_NONE: dict[str, Any] = {}  # (never changed)
_DEFAULTS: dict[str, dict[str, Any]] = {
    "start": {"nc": 0, "meta": {}},
    "gen": {"nc": 0, "hooks": []},
    "step": {"n": 1},
}


@dataclass
class Run:
    """One run of the family as far as the loaded journal tells."""

    id: str
    workflow: str
    parent: str | None
    input: Any
    g: int = 0
    gen_pos: int = 0
    start_pos: int = -1  # position of its `start` record (-1: the load began after it)
    gen_at: float = 0.0
    gen_nc: int = 0
    gen_hooks: list[str] = field(default_factory=list)  # as the generation's record lists them
    gen_w: int = -1  # the inbox watermark its generation's record carries (-1: none)
    next_child: int = 0
    records: list[JournalRecord] = field(default_factory=list)
    status: str = "running"  # running | parked | completed | failed
    waiting: Waiting | None = None
    result: Any = None
    error: RunError | None = None
    hooks: set[str] = field(default_factory=set)
    meta: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    updated: float = 0.0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def begin(self, rec: JournalRecord, pos: int) -> None:
        """Start a generation from a `start` or `gen` record."""
        self.g = rec.get("g", 0)
        self.input = rec.get("input")
        self.gen_pos = pos
        self.records = []
        self.status, self.waiting = "running", None
        self.gen_at = rec.get("at", 0.0)
        self.gen_nc = self.next_child = rec.get("nc", 0)
        self.gen_hooks = list(rec.get("hooks", ()))
        inbox = rec.get("inbox")
        self.gen_w = inbox.get("w", -1) if isinstance(inbox, dict) else -1
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
    items: dict[int, InboxItem] = field(default_factory=dict)  # read, not yet received
    inbox_name: str = ""
    log: list[JournalRecord] | None = None  # every whole record applied, when kept
    log_at: list[int] = field(default_factory=list)  # the position of each record in `log`
    gaps: list[int] = field(default_factory=list)  # positions of records a repair replaced

    def apply(self, pos: int, stored: StoredRecord) -> JournalRecord:
        """Fold one journal record into the state; return it whole."""
        self.end = max(self.end, pos)
        rec = self.expand(stored)
        if self.log is not None:
            self.log.append(rec)
            self.log_at.append(pos)
        kind, run_id = rec.get("t"), rec.get("run")
        if kind == GAP:
            self.gaps.append(pos)
            return rec
        if kind == "recv":
            self.consumed.update(rec.get("ids", ()))
        if not isinstance(run_id, str):
            return rec
        run = self.runs.get(run_id)
        if kind == "start" or (kind == "gen" and run is None):
            run = self._new_run(run_id, rec)
        if run is None:
            return rec  # a finished run whose generation began before the scan start
        run.updated = rec.get("at", run.updated)
        _ON_RECORD.get(rec["t"], _on_progress)(run, rec, pos)
        return rec

    def _new_run(self, run_id: str, rec: JournalRecord) -> Run:
        # A load may begin at a `gen` record: what it leaves out, the head has.
        entry = self.head_runs.get(run_id, {})
        run = Run(run_id, rec.get("workflow", ""), rec.get("parent"), rec.get("input"))
        run.meta = dict(rec.get("meta") or entry.get("meta") or {})
        run.created = rec.get("created", entry.get("created", rec.get("at", 0.0)))
        self.runs[run_id] = run
        return run

    # -- stored shapes -------------------------------------------------------------------------
    def _relative(self, run_id: str) -> str:
        return run_id[len(self.root) + 1 :]

    def pack(self, rec: JournalRecord, gen_at: float) -> StoredRecord:
        """The stored form of the whole record `rec` of a run whose current
        generation began at `gen_at`."""
        kind = rec["t"]
        out: dict[str, Any] = {"t": kind}
        if (run_id := rec["run"]) != self.root:
            out["r"] = run_id[len(self.root) + 1 :]  # (`_relative` inline: every record)
        if kind in START_TYPES:
            out["at"] = rec["at"]
        else:
            out["d"] = round((rec["at"] - gen_at) * 1000)
        if kind == "gen":
            out["g"] = rec["g"]
        defaults = _DEFAULTS.get(kind, _NONE)
        for k, v in rec.items():  # the fields of its kind, as they are (it keeps unknown ones)
            if k not in _IMPLIED and defaults.get(k, _UNSET) != v:
                out[k] = v
        if kind in START_TYPES and out.get("inbox", {}).get("x") == []:
            out["inbox"] = out["inbox"]["w"]  # the watermark alone
        if kind == "recv":
            del out["token"], out["values"]
            out["c"] = [self.items[i].check for i in rec["ids"]]
        elif kind == "child":
            out["child"] = self._relative(rec["child"])
            out.pop("workflow", None)  # the child's `start` says it
        elif kind == "park":
            out["waiting"] = self._pack_waiting(rec)
        elif kind == "gen":
            run = self.runs.get(rec["run"])
            if run is not None and out.get("workflow") == run.workflow:
                del out["workflow"]  # the run's `start` (or the head) says it
            if "hooks" in out:
                out["hooks"] = [pack_token(t) for t in out["hooks"]]
        return out  # type: ignore[return-value]  # (a cast without a call: every record)

    def _pack_waiting(self, rec: JournalRecord) -> Waiting:
        waiting = rec["waiting"]
        if "child" in waiting:
            return {"child": self._relative(waiting["child"])}
        run = self.runs.get(rec["run"])
        if "hook" in waiting and run is not None and waiting["hook"] in run.gen_hooks:
            # its place in the `gen`; a deadline (`timer`) goes with it
            return {**waiting, "hook": run.gen_hooks.index(waiting["hook"])}
        return waiting

    def expand(self, stored: StoredRecord) -> JournalRecord:
        """The whole form of a stored record (a fork's records are stored whole, `_fork`)."""
        if "run" in stored or "t" not in stored or stored["t"] == GAP:
            return cast(JournalRecord, stored)
        rec: dict[str, Any] = dict(stored)  # its fields change form one by one
        rel, kind = rec.pop("r", None), rec["t"]
        run_id = rec["run"] = self.root if rel is None else f"{self.root}.{rel}"
        defaults = _DEFAULTS.get(kind)
        if defaults is not None:
            for key, value in defaults.items():
                rec.setdefault(key, value)
        if kind in START_TYPES:
            if "inbox" in rec:
                rec["inbox"] = _inbox_state(rec["inbox"])
            rec.setdefault("g", 0)
            rec["parent"] = run_id.rsplit(".", 1)[0] if rel is not None else None
            if kind == "gen":
                rec["hooks"] = [unpack_token(t) for t in rec["hooks"]]
                if "workflow" not in rec:
                    run = self.runs.get(run_id)
                    head = self.head_runs.get(run_id, {})
                    rec["workflow"] = run.workflow if run else head.get("workflow", "")
            return cast(JournalRecord, rec)
        run = self.runs.get(run_id)
        if run is None:
            return cast(JournalRecord, rec)  # its generation began before the load: not replayed
        rec["g"], rec["at"] = run.g, run.gen_at + rec.pop("d", 0) / 1000
        whole: JournalRecord = rec  # type: ignore[assignment]  # (a cast without a call)
        expand = _EXPAND.get(kind)
        if expand is not None:
            expand(self, whole, run)
        return whole

    def _expand_child(self, rec: JournalRecord, run: Run) -> None:
        rec["child"] = child_id = f"{self.root}.{rec['child']}"
        child = self.runs.get(child_id)
        if child is not None:
            rec.setdefault("workflow", child.workflow)

    def _expand_park(self, rec: JournalRecord, run: Run) -> None:
        rec["waiting"] = self._expand_waiting(rec["waiting"], run)

    def _expand_waiting(self, waiting: Waiting, run: Run) -> Waiting:
        if "child" in waiting:
            return {"child": f"{self.root}.{waiting['child']}"}
        if isinstance(waiting.get("hook"), int):
            index = waiting["hook"]
            if not 0 <= index < len(run.gen_hooks):
                raise CorruptJournalError(
                    f"journal of run family {self.root}", 0, "bad hook reference",
                    what=f"run {run.id} parked on hook {index} of its generation, which lists "
                    f"{len(run.gen_hooks)}", advice=CANNOT_GO_ON,
                )  # fmt: skip
            return {**waiting, "hook": run.gen_hooks[index]}
        return waiting

    def _received(self, rec: JournalRecord, run: Run | None = None) -> None:
        """Fill a `recv` record's token and values from the deliveries it names; one that is
        missing or different marks the record `lost` (replaying it raises `lost_error`, so a
        load that does not replay it, e.g. of an older generation, still works)."""
        ids, checks = rec["ids"], cast(StoredRecord, rec).pop("c", [])
        items = [self.items.pop(i, None) for i in ids]
        for n, item in enumerate(items):
            if item is None or (n < len(checks) and item.check != checks[n]):
                rec["lost"] = ids[n]
                return
        rec["token"] = items[0].token if items else ""  # type: ignore[union-attr]
        rec["values"] = [item.payload for item in items]  # type: ignore[union-attr]

    def check_replayable(self) -> None:
        """Raise `lost_error` if an unfinished run's current generation received a delivery
        the inbox no longer holds (before driving: a later delivery at its position would
        otherwise pass for consumed), `gap_error` if a record a repair replaced lies where
        a replay reads."""
        for run in self.runs.values():
            lost = [r for r in run.records if "lost" in r] if not run.finished else []
            if lost:
                raise self.lost_error(lost[0])
        gap = self.damaging_gap()
        if gap is not None:
            raise self.gap_error(gap)

    def damaging_gap(self) -> int | None:
        """The first replaced record (a repair's gap) a replay could need: one at or after the
        earliest current generation of an unfinished run (what it held may have been any
        record of it: a step, a delivery taken, the generation's start), or any at all when
        the family's first run has no `start` left to begin from."""
        if not self.gaps:
            return None
        root = self.runs.get(self.root)
        if root is None or (root.start_pos < 0 and not self.head_runs):
            return self.gaps[0]
        scan = self.scan_start()
        return next((pos for pos in self.gaps if pos >= scan), None)

    def gap_error(self, pos: int) -> CorruptJournalError:
        """The error driving a family whose replay would cross a record a repair replaced."""
        unfinished = sorted(r.id for r in self.runs.values() if not r.finished)
        return CorruptJournalError(
            f"journal of run family {self.root}",
            pos,
            "record lost",
            what=f"the record at offset {pos} was damaged; a repair kept its bytes in "
            f"quarantine/ and left a gap record in its place, and unfinished run(s) "
            f"{', '.join(unfinished) or '(none)'} cannot be replayed past it",
            advice=CANNOT_GO_ON,
        )

    def lost_error(self, rec: JournalRecord) -> CorruptJournalError:
        """The error replaying a `recv` record whose delivery the inbox no longer holds."""
        return CorruptJournalError(
            self.inbox_name or f"inbox of run family {self.root}",
            rec["lost"],
            "missing delivery",
            what=f"the delivery at position {rec['lost']} that run {rec['run']} received is "
            "missing or different (the inbox was damaged or repaired); the run cannot be "
            "replayed past it",
            advice=CANNOT_GO_ON,
        )

    def inbox_state(self) -> InboxState:
        """The consumption watermark carried by `start` and `gen` records."""
        unconsumed = [item.id for item in self.pending if item.id not in self.consumed]
        watermark = min(unconsumed, default=self.inbox_next)
        watermark = max(watermark, self.watermark)
        extra = sorted(i for i in self.consumed if i >= watermark)
        return {"w": watermark, "x": extra}

    def read_inbox(self, world: World) -> bool:
        """Pick up deliveries that arrived since the last read; False when there were none
        (nothing to take that was not there before)."""
        end = world.inbox_end(self.root)
        if end == self.inbox_mark == self.inbox_next:  # (`inbox_unchanged` inline)
            return False  # unchanged since a read that reached its end (a turn polls every step)
        self.inbox_mark = end
        items, self.inbox_next = world.read_inbox(self.root, self.inbox_next)
        self.pending.extend(items)
        self.items.update((item.id, item) for item in items)
        return bool(items)

    def inbox_unchanged(self, end: int | None) -> bool:
        """Whether an inbox at mark `end` holds nothing `read_inbox` has not read."""
        return end == self.inbox_mark == self.inbox_next

    def take(self, token: str, limit: int | None) -> list[InboxItem]:
        """Unconsumed deliveries for `token`, oldest first (not yet marked consumed)."""
        if not self.pending:
            return []  # (nearly always: a turn polls at every action boundary)
        found = [i for i in self.pending if i.token == token and i.id not in self.consumed]
        return found if limit is None else found[:limit]

    def consume(self, ids: list[int]) -> None:
        self.consumed.update(ids)
        taken = set(ids)
        self.pending = [i for i in self.pending if i.id not in taken]

    def inbox_floor(self) -> int | None:
        """The inbox id below which no delivery is read again: the lowest watermark of the
        unfinished runs' current generations (a load reads the inbox from the watermark of
        the record it starts at, the earliest of them; a delivery received later was
        unconsumed when that record was written). None when no run is unfinished or one's
        watermark is unknown."""
        marks = [r.gen_w for r in self.runs.values() if not r.finished]
        return min(marks) if marks and min(marks) >= 0 else None

    def scan_start(self) -> int:
        """Where a later load may begin: the earliest current generation still needed."""
        starts = [r.gen_pos for r in self.runs.values() if not r.finished]
        return min(starts, default=self.end + 1)


def load_family(world: World, root: str, *, full: bool = False, log: bool = False) -> Family:
    """Rebuild a family from its journal, starting where the head says it may (or at 0);
    `log` keeps every record read, whole, in `Family.log`."""
    head = None if full else scheduling(world).read_head(root)
    start = head.get("scan", 0) if head and head.get("v") == HEAD_VERSION else 0
    records = world.load(root, start) if start else world.load(root, 0)
    if records.start and not (records.records and _is_scan_start(records.records[0][1])):
        records = world.load(root, 0)  # the hint pointed somewhere odd: read everything
    family = Family(root)
    if head and records.start:
        family.head_runs = dict(head.get("runs", {}))
    if records.start:
        inbox = _inbox_state(records.records[0][1]["inbox"])
        family.watermark = inbox["w"]
        family.consumed = set(inbox["x"])
    family.inbox_next = family.watermark
    family.inbox_name = scheduling(world).inbox_name(root)
    family.log = [] if log else None
    family.read_inbox(world)  # first: `recv` records take their payloads from it
    for pos, rec in records.records:
        family.apply(pos, rec)
    return family


def _is_scan_start(rec: StoredRecord) -> bool:
    return rec.get("t") in START_TYPES and isinstance(rec.get("inbox"), dict | int)


def _inbox_state(stored: InboxState | int) -> InboxState:
    """A `start`/`gen` record's inbox state whole (`{w, x: []}` is stored as `w`)."""
    return {"w": stored, "x": []} if isinstance(stored, int) else stored


# -- what a record does to its run, by kind (`Family.apply`; others: `_on_progress`) -----------
def _on_start(run: Run, rec: JournalRecord, pos: int) -> None:
    run.begin(rec, pos)
    run.start_pos = pos


def _on_gen(run: Run, rec: JournalRecord, pos: int) -> None:
    run.begin(rec, pos)


def _on_done(run: Run, rec: JournalRecord, pos: int) -> None:
    run.status, run.result = "completed", rec.get("result")


def _on_failed(run: Run, rec: JournalRecord, pos: int) -> None:
    run.status, run.error = "failed", rec.get("error")


def _on_progress(run: Run, rec: JournalRecord, pos: int) -> None:
    """A record of the run's progress, replayed in order (`step`, `hook`, `recv`, ...)."""
    run.records.append(rec)
    if rec["t"] == "park":
        run.status, run.waiting = "parked", rec.get("waiting")
        return
    run.status, run.waiting = "running", None
    if rec["t"] == "hook":
        run.hooks.add(rec["token"])
    elif rec["t"] == "child":
        run.next_child = max(run.next_child, int(rec["child"].rsplit(".", 1)[1]) + 1)


_ON_RECORD: dict[str, Callable[[Run, JournalRecord, int], None]] = {
    "start": _on_start,
    "gen": _on_gen,
    "done": _on_done,
    "failed": _on_failed,
}
# The fields a kind stores in a form of its own (`Family.expand`), by kind.
_EXPAND: dict[str, Callable[[Family, JournalRecord, Run], None]] = {
    "recv": Family._received,
    "child": Family._expand_child,
    "park": Family._expand_park,
}


def parks_on_timer(head: dict[str, Any]) -> bool:
    """Whether a run of a family with this head is parked on a timer (alone or a receive's
    deadline): writing such a head changes `Engine.timers_version`."""
    return any(
        entry.get("status") == "parked" and "timer" in (entry.get("waiting") or {})
        for entry in (head.get("runs") or {}).values()
    )


def head_wake(head: dict[str, Any] | None) -> tuple[float | None, int | None]:
    """When a family with this head has work without a new delivery (`due`: a unix time;
    -inf for now: a run is running, or the head is missing), and the inbox mark after which
    a delivery gives it work (`mark`, None: none waits on a hook) — what `Engine.runnable`
    looks for, per family, for a world that finds such families with an index."""
    if head is None:
        return float("-inf"), None
    due: float | None = None
    mark: int | None = None
    for entry in (head.get("runs") or {}).values():
        status, waiting = entry.get("status"), entry.get("waiting") or {}
        if status == "running":
            return float("-inf"), None
        if status != "parked":
            continue
        timer = waiting.get("timer")
        if isinstance(timer, int | float):
            due = timer if due is None else min(due, timer)
        if "hook" in waiting:
            found = head.get("inbox_mark")
            mark = found if isinstance(found, int) else -1  # no mark: any inbox is news
    return due, mark


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
