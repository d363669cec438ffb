"""Rich tables shared by `eve inspect` and the chat's `/sessions`, and the plain formats they
use (Rich is imported only when a table or a styled status is built)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

STATUS_STYLES = {
    "running": "cyan",
    "waiting": "green",
    "parked": "yellow",
    "completed": "dim",
    "failed": "red",
    "cancelled": "dim",
    "damaged": "bold red",
    "interrupted": "magenta",
}


def status_text(row: Mapping[str, Any]) -> Text:
    """`parked (approval)` and friends, coloured by status."""
    from rich.text import Text

    status = str(row.get("status") or "?")
    label = status
    if status == "parked" and row.get("parkedOn"):
        label = f"parked ({row['parkedOn']})"
    return Text(label, style=STATUS_STYLES.get(status, ""))


def human_bytes(size: Any) -> str:
    if not isinstance(size, int | float):
        return ""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def when(value: Any) -> str:
    """A timestamp (ISO string, datetime or epoch seconds) as `YYYY-MM-DD HH:MM:SS` UTC."""
    if value is None or value == "":
        return ""
    moment: datetime | None = None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int | float):
        moment = datetime.fromtimestamp(value, UTC)
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def sessions_table(rows: Sequence[Mapping[str, Any]], current: str | None = None) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=None, show_edge=False, header_style="bold")
    lineage = any(row.get("forkedFrom") or row.get("forks") for row in rows)
    names = ["session", "agent", "status", "turns", "steps", "last activity", "size"]
    for name in names + (["lineage"] if lineage else []):
        table.add_column(
            name,
            justify="right" if name in ("turns", "steps", "size") else "left",
            no_wrap=name in ("session", "status", "last activity"),
        )
    for row in rows:
        sid = str(row.get("id"))
        table.add_row(
            Text(sid, style="bold" if sid == current else ""),
            str(row.get("agent") or ""),
            status_text(row),
            str(row.get("turns", "")),
            str(row.get("steps", "")),
            when(row.get("updatedAt")),
            human_bytes(row.get("bytes")),
            *([lineage_text(row)] if lineage else []),
        )
    return table


def lineage_text(row: Mapping[str, Any]) -> str:
    """`fork of S at T.S`, `forked 2×` or both: a session's place among its forks."""
    parts = []
    origin = row.get("forkedFrom")
    if isinstance(origin, Mapping):
        parts.append(f"fork of {origin.get('session')} at {origin.get('checkpoint')}")
    forks = row.get("forks") or []
    if forks:
        parts.append(f"forked {len(forks)}×")
    return "; ".join(parts)
