"""`eve gc --older-than DURATION [--dry-run] [--waiting] [--force] [--json]`: retention.

Removes the data of sessions that ended (completed, failed, cancelled) and whose files were
last written longer ago than DURATION: the run folder (the session and its sub-agent runs),
its streams (`<kind>.<session>[.<n>]`) and the hook files naming it. `--waiting` also removes
idle sessions waiting for their next message; `--force` also parked ones (waiting for an
approval or an answer) and interrupted ones (a turn was running when its process died).
Leftovers of an interrupted removal or creation (streams or hooks of a session that no longer
exists, a run folder without a journal) are swept too. Reports the bytes freed.

No flag removes a session a live process owns: ownership is an flock on `owner.lock`, free the
moment its owner dies, so "nobody owns it" is proven by taking it. gc holds the session's lease
and its inbox lock while it removes, and decides again under them (a message delivered or a
turn run since the listing keeps the session), so no process runs or delivers to a session
half removed: one that waited for the lease, or delivers after, finds no session.

Removal order makes a crash at any point harmless: hooks, then streams, then the run folder
(its journal, then its lock files), so a half-removed session is still listed and the next gc
finishes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

import filelock
import typer
from rich.console import Console
from rich.table import Table

from eve_cli._loader import DEFAULT_AGENT_DIR
from eve_cli.runtime import Runtime, RuntimeErrorBase
from world import OwnershipError, WorldError

from ._context import DataOption, data_path
from ._errors import EXIT_USAGE, CliError
from ._tables import human_bytes, when

FINISHED = ("completed", "failed", "cancelled")
FORCED = ("parked", "interrupted")  # removed only with --force
_LOCKS = ("owner.lock", "inbox.lock")  # removed last: a waiter on them then finds no journal
INBOX_WAIT = 5.0  # seconds gc waits for a delivery in progress to finish
_STREAM_KINDS = ("events", "history")  # eve_cli._session: events_stream, history_stream
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
    files: list[str] = field(default_factory=list)  # relative to the data directory
    action: str = ""  # removed | would remove | skipped: <why>


def gc(
    older_than: Annotated[
        str, typer.Option("--older-than", metavar="DURATION", help="e.g. 30m, 12h, 7d.")
    ],
    data: DataOption = None,
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
    path = data_path(data)
    if not (path / "runs").is_dir():
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


def collect(root: Path, cutoff: float, allowed: set[str], dry_run: bool) -> list[Entry]:
    """Find (and unless `dry_run`, remove) what is older than `cutoff` and allowed."""
    try:
        # Never the user's agent code, and the built-in agent only if a view needs it.
        rt = Runtime(root, agent_dir=DEFAULT_AGENT_DIR, load_agent=False)
    except WorldError as exc:
        raise CliError(f"{exc}; run `eve doctor`") from None
    try:
        files = _files_by_family(root)
        entries = []
        for sid in sorted(files):
            entry = _consider(rt, root, sid, files[sid], cutoff, allowed)
            if entry is None:
                continue
            if not entry.action:
                entry.action = (
                    "would remove" if dry_run else _remove(rt, root, entry, cutoff, allowed)
                )
            entries.append(entry)
        return entries
    finally:
        rt.close()


def _files_by_family(root: Path) -> dict[str, list[Path]]:
    """Every file of the layout grouped by the run family (session) it belongs to."""
    out: dict[str, list[Path]] = {}
    for folder in _list(root / "runs"):
        out.setdefault(folder.name, [])
    for hook in _list(root / "hooks"):
        try:
            owner = hook.read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue  # `eve doctor` reports it
        if owner:
            out.setdefault(owner.split(".", 1)[0], []).append(hook)
    for stream in _list(root / "streams"):
        # eve names a session's streams `<kind>.<session>[.<child>]` (see eve_cli._session).
        parts = stream.name.split(".")
        if len(parts) >= 3 and parts[0] in _STREAM_KINDS and parts[-1] in ("msgpack", "idx"):
            out.setdefault(parts[1], []).append(stream)
    return out


def _list(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except FileNotFoundError:
        return []


def _consider(
    rt: Runtime, root: Path, sid: str, extra: list[Path], cutoff: float, allowed: set[str]
) -> Entry | None:
    folder = root / "runs" / sid
    files = [*extra, *sorted(p for p in _list(folder) if p.is_file())]
    stats = [s for s in (_stat(p) for p in files) if s is not None]
    last = max((s.st_mtime for s in stats), default=0.0)
    if last > cutoff:
        return None
    entry = Entry(sid, "", last, sum(s.st_size for s in stats),
                  [str(p.relative_to(root)) for p in files])  # fmt: skip
    if not (folder / "journal.msgpack").exists():
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


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def _remove(rt: Runtime, root: Path, entry: Entry, cutoff: float, allowed: set[str]) -> str:
    """Remove one session under its lease and inbox lock, if it still qualifies there."""
    folder = root / "runs" / entry.id
    if entry.status == "leftover":
        return _unlink_all(root, folder, entry)
    try:
        lease = rt.world.acquire(entry.id)
    except OwnershipError:
        return _OWNED
    except WorldError as exc:
        return f"skipped: {exc}"
    inbox = filelock.FileLock(str(folder / "inbox.lock"), timeout=INBOX_WAIT,
                              preserve_lock_file=True)  # fmt: skip
    try:
        inbox.acquire()
    except (filelock.Timeout, OSError):
        lease.release()
        return "skipped: a delivery is in progress"
    try:
        # Listed before the locks were taken: a delivery or a turn since then keeps it.
        status = str(rt.session(entry.id)["status"])
        status = "interrupted" if status == "running" else status  # the lease is ours
        written = max((s.st_mtime for s in map(_stat, _paths(root, entry)) if s), default=0.0)
        if status not in allowed or written > cutoff:
            return f"skipped: changed while gc ran (now {status})"
        return _unlink_all(root, folder, entry)
    except (WorldError, OSError, RuntimeErrorBase) as exc:
        return f"skipped: {exc}"
    finally:
        inbox.release()
        lease.release()


def _paths(root: Path, entry: Entry) -> list[Path]:
    return [root / rel for rel in entry.files] + _list(root / "runs" / entry.id)


def _unlink_all(root: Path, folder: Path, entry: Entry) -> str:
    """Hooks and streams, the run folder's data, its journal, its lock files, the folder."""
    try:
        for rel in entry.files:
            path = root / rel
            if path.parent != folder:
                path.unlink(missing_ok=True)
        journal = folder / "journal.msgpack"
        last = [journal, *(folder / name for name in _LOCKS)]
        for path in _list(folder):
            if path not in last:
                _delete(path)
        for path in last:
            path.unlink(missing_ok=True)
        if folder.exists():
            folder.rmdir()
    except OSError as exc:
        return f"skipped: {exc.strerror or exc} (the next gc finishes it)"
    return "removed"


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


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
