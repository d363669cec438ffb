"""`eve gc --older-than DURATION [--dry-run] [--waiting] [--force] [--json]`: retention.

Removes the data of sessions that ended (completed, failed, cancelled) and that nothing was
stored to for longer than DURATION (`World.family_usage`): the session and its sub-agent runs,
its streams and its hooks (`World.remove_family`). `--waiting` also removes idle sessions
waiting for their next message; `--force` also parked ones (waiting for an approval or an
answer) and interrupted ones (a turn was running when its process died). Leftovers of an
interrupted removal or creation (`World.remnants`) are swept too. Reports the bytes freed.

No flag removes a session a live process owns: "nobody owns it" is proven by taking its lease.
gc holds the lease while it removes and decides again under it (a turn run since the listing
keeps the session); the world removes it only if nothing was delivered since gc decided, and
a process that delivers or takes the lease after finds no session. It works on any world,
through the `World` interface only.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from eve_cli._loader import DEFAULT_AGENT_DIR
from eve_cli.runtime import Runtime, RuntimeErrorBase
from world import OwnershipError, WorldError

from ._context import DataOption, Where, WorldOption, choose_world
from ._errors import EXIT_USAGE, CliError
from ._tables import human_bytes, when

FINISHED = ("completed", "failed", "cancelled")
FORCED = ("parked", "interrupted")  # removed only with --force
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `12h`, `7d`, `2w`, or a sum such as `1h30m`, in seconds."""
    parts = _DURATION.findall(text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != text.strip().lower():
        raise CliError(
            f"invalid duration {text!r}: use a number and a unit s, m, h, d or w "
            "(e.g. 30m, 7d, 1h30m)",
            EXIT_USAGE,
        )
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass
class Entry:
    """One session (or leftover) considered by gc."""

    id: str
    status: str
    last_write: float
    bytes: int
    action: str = ""  # removed | would remove | skipped: <why>


def gc(
    older_than: Annotated[
        str, typer.Option("--older-than", metavar="DURATION", help="e.g. 30m, 12h, 7d.")
    ],
    data: DataOption = None,
    world: WorldOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only report what would be removed.")
    ] = False,
    waiting: Annotated[
        bool, typer.Option("--waiting", help="Also idle sessions waiting for a message.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also parked and interrupted sessions nobody owns (never one a live process "
            "owns: no flag removes that).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Write the report as JSON.")] = False,
) -> None:
    """Remove the data of ended sessions not written to for DURATION; report bytes freed.

    A session a live process owns (running now) is never removed, whatever the flags.
    """
    age = parse_duration(older_than)
    path = choose_world(data, world)
    if path.url is None and not path.path.is_dir():
        raise CliError(f"{path}: no eve data directory there; pass --data DIR")
    allowed = set(FINISHED) | ({"waiting"} if waiting else set())
    if force:
        allowed |= set(FORCED)
    entries = collect(path, time.time() - age, allowed, dry_run)
    removed = [e for e in entries if not e.action.startswith("skipped")]
    freed = sum(e.bytes for e in removed)
    if as_json:
        report = {
            "dataDir": str(path),
            "dryRun": dry_run,
            "bytesFreed": 0 if dry_run else freed,
            "bytesToFree": freed,
            "entries": [asdict(e) for e in entries],
        }
        typer.echo(json.dumps(report, indent=2))
        return
    _print(entries, freed, dry_run)


def collect(root: Where | Path, cutoff: float, allowed: set[str], dry_run: bool) -> list[Entry]:
    """Find (and unless `dry_run`, remove) what is older than `cutoff` and allowed."""
    try:
        # Never the user's agent code, and the built-in agent only if a view needs it.
        where = root if isinstance(root, Path) else root.url or root.path
        rt = Runtime(where, agent_dir=DEFAULT_AGENT_DIR, load_agent=False)
    except WorldError as exc:
        raise CliError(f"{exc}; run `eve doctor`") from None
    try:
        world = rt.world
        remnants = set(world.remnants())
        entries = []
        for sid in sorted(set(world.families()) | remnants):
            entry = _consider(rt, sid, sid in remnants, cutoff, allowed)
            if entry is None:
                continue
            if not entry.action:
                entry.action = "would remove" if dry_run else _remove(rt, entry, cutoff, allowed)
            entries.append(entry)
        return entries
    finally:
        rt.close()


def _consider(
    rt: Runtime, sid: str, remnant: bool, cutoff: float, allowed: set[str]
) -> Entry | None:
    try:
        usage = rt.world.family_usage(sid)
    except WorldError as exc:
        return Entry(sid, "damaged", 0.0, 0, action=f"skipped: {exc}")
    if usage.last_write > cutoff:
        return None
    entry = Entry(sid, "", usage.last_write, usage.bytes)
    if remnant:
        entry.status = "leftover"  # an interrupted removal or creation
        return entry
    try:
        entry.status = _status(rt, sid)
    except RuntimeErrorBase:
        return None  # a run of the world that is not an eve session: not ours to remove
    except (WorldError, OSError) as exc:
        entry.status, entry.action = "damaged", f"skipped: {exc}"
        return entry
    if entry.status == "running":
        entry.action = _OWNED
    elif entry.status not in allowed:
        entry.action = f"skipped: {entry.status}" + (
            " (use --waiting)" if entry.status == "waiting" else " (use --force)"
        )
    return entry


_OWNED = "skipped: owned by a live process"


def _status(rt: Runtime, sid: str) -> str:
    """The session's status; a running one whose lease is free is `interrupted`."""
    status = str(rt.session(sid)["status"])
    if status != "running":
        return status
    try:
        rt.world.acquire(sid).release()
    except OwnershipError:
        return "running"
    return "interrupted"


def _remove(rt: Runtime, entry: Entry, cutoff: float, allowed: set[str]) -> str:
    """Remove one session under its lease, if it still qualifies there; the world removes it
    only if nothing was delivered since gc decided (`World.remove_family`'s mark)."""
    world = rt.world
    try:
        if entry.status == "leftover":
            world.remove_family(entry.id)
            return "removed"
        lease = world.acquire(entry.id)
    except OwnershipError:
        return _OWNED
    except WorldError as exc:
        return f"skipped: {exc}"
    try:
        # Listed before the lease was taken: a delivery or a turn since then keeps it.
        mark = world.inbox_end(entry.id)
        status = str(rt.session(entry.id)["status"])
        status = "interrupted" if status == "running" else status  # the lease is ours
        written = world.family_usage(entry.id).last_write
        if status not in allowed or written > cutoff:
            return f"skipped: changed while gc ran (now {status})"
        if not world.remove_family(entry.id, inbox_mark=mark):
            return f"skipped: changed while gc ran (now {status})"
        return "removed"
    except OwnershipError:
        return "skipped: a delivery is in progress"
    except (WorldError, RuntimeErrorBase) as exc:
        return f"skipped: {exc}"
    finally:
        lease.release()


def _print(entries: list[Entry], freed: int, dry_run: bool) -> None:
    console = Console(highlight=False, soft_wrap=True)
    if entries:
        table = Table(show_edge=False, header_style="bold")
        table.add_column("session", overflow="fold")
        for name in ("status", "last write", "size", "action"):
            table.add_column(name, justify="right" if name == "size" else "left")
        for e in entries:
            table.add_row(e.id, e.status, when(e.last_write), human_bytes(e.bytes), e.action)
        console.print(table)
    done = [e for e in entries if not e.action.startswith("skipped")]
    verb = "would remove" if dry_run else "removed"
    console.print(
        f"{verb} {len(done)} session(s), {'would free' if dry_run else 'freed'} "
        f"{human_bytes(freed)} ({freed} bytes)"
    )


def register(app: typer.Typer) -> None:
    app.command("gc")(gc)
